-- push.lua: lease owed pushes of a queue to a dispatcher, and record their outcome.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: action, now_ms, then per action:
--   "lease", now, lease_ms, limit, token, owed_by: take up to limit pushes owed by owed_by
--       (oldest first) for lease_ms after owed_by: until then no other dispatcher takes them;
--       if the dispatcher dies, they are due again when the lease ends. Pushes whose message or subscription is gone (deleted,
--       expired, purged) are dropped. Returns {earliest, metadata JSON (false: no queue),
--       delivery, attempts, owed at, subscription record, body, message info, delivery, ...},
--       earliest being the queue's earliest owed push after the lease (0 for none).
--   "settle", now, then four values per attempt: delivery, token, retry_at, consume: the
--       outcome of the attempt leased under token. retry_at 0: done (delivered, or given up);
--       else due again at retry_at, one attempt more. consume 1 (a delivered push of a queue
--       with _delete_after_push): the message is deleted when no other subscription is owed
--       it. A lease that ran out and was taken again is left to its new holder.
--       Returns {earliest}.

local action, now = ARGV[1], tonumber(ARGV[2])

local function forget(delivery)
    redis.call('ZREM', K_DELIVERIES, delivery)
    redis.call('HDEL', K_DELIVERY_INFO, delivery)
end

-- The outcome of one attempt (see "settle" above).
local function settle(delivery, token, retry_at, consume)
    local state = redis.call('HGET', K_DELIVERY_INFO, delivery)
    if not state then
        return
    end
    local attempts, holder = unpack(cmsgpack.unpack(state))
    if holder ~= token then
        return
    end
    if retry_at ~= 0 then
        redis.call('HSET', K_DELIVERY_INFO, delivery, cmsgpack.pack({attempts + 1, ''}))
        redis.call('ZADD', K_DELIVERIES, retry_at, delivery)
        return
    end
    forget(delivery)
    if consume then
        local mid = string.sub(delivery, string.find(delivery, ':', 1, true) + 1)
        for _, sid in ipairs(redis.call('HKEYS', K_SUBSCRIPTIONS)) do
            if redis.call('ZSCORE', K_DELIVERIES, sid .. ':' .. mid) then
                return
            end
        end
        remove_messages({mid})
    end
end

if action == 'lease' then
    local lease_ms, limit, token = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
    local owed_by = tonumber(ARGV[6])
    local out = {0, redis.call('HGET', K_QUEUE, 'm')}
    local due = redis.call(
        'ZRANGEBYSCORE', K_DELIVERIES, '-inf', owed_by, 'WITHSCORES', 'LIMIT', 0, limit)
    for i = 1, #due, 2 do
        local delivery, owed = due[i], due[i + 1]
        local split = string.find(delivery, ':', 1, true)
        local sid, mid = string.sub(delivery, 1, split - 1), string.sub(delivery, split + 1)
        local subscription = redis.call('HGET', K_SUBSCRIPTIONS, sid)
        local info = load_info(mid)
        if not subscription or cmsgpack.unpack(subscription)[S_EXPIRES] <= now
            or not info or info[I_EXPIRES] <= now then
            forget(delivery)
        else
            local state = redis.call('HGET', K_DELIVERY_INFO, delivery)
            local attempts = state and cmsgpack.unpack(state)[1] or 0
            redis.call('HSET', K_DELIVERY_INFO, delivery, cmsgpack.pack({attempts, token}))
            redis.call('ZADD', K_DELIVERIES, owed_by + lease_ms, delivery)
            out[#out + 1] = delivery
            out[#out + 1] = attempts
            out[#out + 1] = owed
            out[#out + 1] = subscription
            out[#out + 1] = redis.call('HGET', K_BODIES, mid)
            out[#out + 1] = redis.call('HGET', K_INFOS, mid)
        end
    end
    out[1] = earliest_push()
    return out
elseif action == 'settle' then
    for i = 3, #ARGV, 4 do
        settle(ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3] == '1')
    end
    return {earliest_push()}
end
return redis.error_reply('unknown action ' .. action)
