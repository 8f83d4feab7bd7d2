-- push.lua: lease owed pushes of a queue to a dispatcher, and record their outcome.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: action, now_ms, then per action:
--   "lease", now, lease_ms, limit, token, owed_by: take up to limit pushes owed by owed_by
--       (oldest first) for lease_ms after owed_by: until then no other dispatcher takes them;
--       if the dispatcher dies, they are due again when the lease ends. Pushes whose message
--       or subscription is gone (deleted, expired, purged) are dropped; pushes whose message
--       is due later than owed_by (rescheduled since) are owed again at its due time. A
--       subscription's
--       dispatch limits (options _max_dispatches_per_second, _max_concurrent_dispatches) hold
--       back what they must: past its rate, a push is owed again at the next free time the
--       limit reserves for it; at its most requests in flight, it is parked until one of them
--       ends. Returns {earliest, metadata JSON (false: no queue), delivery, attempts, send at,
--       subscription record, body, message record, delivery, ...}, earliest being the queue's
--       earliest owed push after the lease (0 for none), send at the time the push is owed
--       or its message is due, whichever is later (or the one its rate limit reserved), never
--       sent before.
--   "settle", now, then four values per attempt: delivery, token, retry_at, kind: the
--       outcome of the attempt leased under token. retry_at 0: done (delivered, or given up);
--       else due again at retry_at, one attempt more. kind SETTLE_CONSUME (a delivered push
--       of a queue with _delete_after_push): the message is deleted when no other
--       subscription is owed it; SETTLE_UNSENT (given back before it was sent): no attempt
--       more. A lease that ran out and was taken again is left to its new holder. Each request
--       that ended frees a place for one parked push of its subscription.
--       Returns {earliest, the earliest owed time of the pushes it put back (0 for none),
--       the ids of the messages it deleted}.

local action, now = ARGV[1], tonumber(ARGV[2])

local function forget(delivery)
    redis.call('ZREM', K_DELIVERIES, delivery)
    redis.call('HDEL', K_DELIVERY_INFO, delivery)
end

-- The dispatch limits of a subscription record: {interval ms or nil, concurrency or nil}.
local function limits_of(record)
    local ok, options = pcall(cjson.decode, record[S_OPTIONS])
    if not ok or type(options) ~= 'table' then
        return {}
    end
    local rate = tonumber(options[O_MAX_DISPATCHES_PER_SECOND])
    local concurrency = tonumber(options[O_MAX_CONCURRENT_DISPATCHES])
    return {rate and rate > 0 and 1000 / rate or nil, concurrency}
end

-- The limit state of a subscription: {t = next free slot ms, o = offset ms (nil: 0), l = last
-- send ms (nil: none), f = {delivery -> lease end}}. A push is sent at its rate's slot plus
-- the offset, never before now nor within an interval of the last send; the offset grows to
-- match what holds it back, so the later slots move with it (storage/rate_reservation.py
-- says it at length).
local function load_limits(sid)
    local raw = redis.call('HGET', K_PUSH_LIMITS, sid)
    local state = raw and cmsgpack.unpack(raw) or {}
    state.t = state.t or 0
    state.f = state.f or {}
    return state
end

local function store_limits(sid, state)
    if next(state.f) == nil and state.t + (state.o or 0) <= now then
        redis.call('HDEL', K_PUSH_LIMITS, sid)
    else
        redis.call('HSET', K_PUSH_LIMITS, sid, cmsgpack.pack(state))
    end
end

-- Requests in flight, forgetting those whose lease ran out (their dispatcher died).
local function in_flight(state)
    local count = 0
    for delivery, lease_end in pairs(state.f) do
        if lease_end <= now then
            state.f[delivery] = nil
        else
            count = count + 1
        end
    end
    return count
end

local function park(sid, delivery, owed)
    local mid = string.sub(delivery, #sid + 2)
    redis.call('ZADD', K_PARKED, 0, sid .. '|' .. string.format('%016x', owed) .. '|' .. mid)
    owe_push_again(delivery, PARKED + owed)
end

-- The ids of the messages settle() deleted, in the order it deleted them.
local consumed = {}

-- The outcome of one attempt (see "settle" above); returns the earliest owed time of what it
-- unparked (0 for none).
local function settle(delivery, token, retry_at, kind)
    local state = redis.call('HGET', K_DELIVERY_INFO, delivery)
    if not state then
        return 0
    end
    local attempts, holder = unpack(cmsgpack.unpack(state))
    if holder ~= token then
        return 0
    end
    local sid = string.sub(delivery, 1, string.find(delivery, ':', 1, true) - 1)
    local unparked = 0
    local raw_limits = redis.call('HGET', K_PUSH_LIMITS, sid)
    if raw_limits then
        local limits = cmsgpack.unpack(raw_limits)
        if limits.f and limits.f[delivery] then
            limits.f[delivery] = nil
            store_limits(sid, {t = limits.t or 0, o = limits.o, l = limits.l, f = limits.f})
            unparked = unpark(sid, 1)
        end
    end
    if retry_at ~= 0 then
        local attempted = kind == SETTLE_UNSENT and 0 or 1
        redis.call('HSET', K_DELIVERY_INFO, delivery, cmsgpack.pack({attempts + attempted, ''}))
        redis.call('ZADD', K_DELIVERIES, retry_at, delivery)
        return unparked
    end
    forget(delivery)
    if kind == SETTLE_CONSUME then
        local mid = string.sub(delivery, #sid + 2)
        -- Owed to a subscription still there: a deleted or expired one's push is dropped.
        for _, other in ipairs(live_subscription_ids(now)) do
            if redis.call('ZSCORE', K_DELIVERIES, other .. ':' .. mid) then
                return unparked
            end
        end
        local info = load_info(mid)
        if info then
            remove_messages({info})
            table.insert(consumed, mid)
        end
    end
    return unparked
end

if action == 'lease' then
    local lease_ms, limit, token = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
    local owed_by = tonumber(ARGV[6])
    local lease_end = owed_by + lease_ms
    local out = {0, redis.call('HGET', K_QUEUE, 'm')}
    local due = redis.call(
        'ZRANGEBYSCORE', K_DELIVERIES, '-inf', owed_by, 'WITHSCORES', 'LIMIT', 0,
        limit + SCAN_EXTRA)
    local limited = {}  -- sid -> {interval, concurrency, state} of the subscriptions seen
    local leased = 0
    for i = 1, #due, 2 do
        if leased == limit then
            break
        end
        local delivery, owed = due[i], tonumber(due[i + 1])
        local split = string.find(delivery, ':', 1, true)
        local sid, mid = string.sub(delivery, 1, split - 1), string.sub(delivery, split + 1)
        local subscription = redis.call('HGET', K_SUBSCRIPTIONS, sid)
        local record = subscription and cmsgpack.unpack(subscription)
        local info = load_info(mid)
        local limits = record and limited[sid]
        if record and not limits then
            local interval, concurrency = unpack(limits_of(record))
            limits = {interval, concurrency, (interval or concurrency) and load_limits(sid)}
            limited[sid] = limits
        end
        if not record or record[S_EXPIRES] <= now then
            forget(delivery)
            drop_parked(sid)
            limited[sid] = nil
        elseif not info or info.expires <= now then
            forget(delivery)
            if limits[3] then
                limits[3].f[delivery] = nil
            end
        elseif info.due > owed_by then
            -- The message was rescheduled or edited to a later due time: owed then, never
            -- sent before its message is due.
            owe_push_again(delivery, info.due)
        else
            local raw_state = redis.call('HGET', K_DELIVERY_INFO, delivery)
            local state = raw_state and cmsgpack.unpack(raw_state) or {0, '', 0}
            -- A time its rate reserved (state[3]) and the slot that time is of (state[4];
            -- absent from a reservation made before rates had an offset: the time itself).
            local attempts, reserved, slot = state[1], state[3] or 0, state[4] or state[3]
            local interval, concurrency, held = limits[1], limits[2], limits[3]
            -- Never sent before its message is due (a later due time within the lease).
            local send_at = math.max(owed, info.due)
            local take = true
            if concurrency and in_flight(held) >= concurrency then
                park(sid, delivery, owed)
                take = false
            elseif interval then
                local offset = held.o or 0
                if reserved ~= owed or send_at ~= owed then
                    -- The rate's next free slot is this push's, not before now (a backlog is
                    -- spaced from when it is sent, not sent at once). A slot reserved before
                    -- is kept unless its message is due later.
                    slot = math.ceil(math.max(math.max(send_at, now) - offset, held.t))
                end
                -- Past the slot also when it was reserved before: a state whose reservations
                -- all passed may have been dropped (store_limits), and t + o must stay an
                -- interval past the last send for store_limits to drop it only then.
                held.t = math.max(held.t, slot + interval)
                send_at = math.ceil(math.max(
                    slot + offset, now, held.l and held.l + interval or 0))
                held.o = send_at - slot
                if send_at > owed_by then
                    redis.call('ZADD', K_DELIVERIES, send_at, delivery)
                    redis.call('HSET', K_DELIVERY_INFO, delivery,
                        cmsgpack.pack({attempts, '', send_at, slot}))
                    take = false
                else
                    held.l = send_at
                end
            end
            if take then
                if held then
                    held.f[delivery] = lease_end
                end
                redis.call('HSET', K_DELIVERY_INFO, delivery, cmsgpack.pack({attempts, token}))
                redis.call('ZADD', K_DELIVERIES, lease_end, delivery)
                leased = leased + 1
                out[#out + 1] = delivery
                out[#out + 1] = attempts
                out[#out + 1] = send_at
                out[#out + 1] = subscription
                out[#out + 1] = body_of(info)
                out[#out + 1] = encode_record(info)
            end
        end
    end
    for sid, limits in pairs(limited) do
        local held = limits[3]
        if held then
            -- Places freed by leases that ran out: what waits for them is owed again.
            local free = limits[2] and limits[2] - in_flight(held) or 0
            if free > 0 then
                unpark(sid, free)
            end
            store_limits(sid, held)
        end
    end
    out[1] = earliest_push()
    return out
elseif action == 'settle' then
    local unparked = 0
    for i = 3, #ARGV, 4 do
        local earliest = settle(ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]))
        if earliest > 0 and (unparked == 0 or earliest < unparked) then
            unparked = earliest
        end
    end
    return {earliest_push(), unparked, consumed}
end
return redis.error_reply('unknown action ' .. action)
