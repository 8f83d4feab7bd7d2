-- subscription.lua: create, update, confirm, list or delete the subscriptions of a queue.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: action, now_ms, then per action:
--   "create", now, id, subscriber, ttl, options_json, secret: subscribe (creating the queue if
--       it is missing), unless a live subscription has this subscriber.
--       Returns {1, id, queue_created} or {0, existing id, 0}.
--   "update", now, id, subscriber ("" keeps it), ttl (0 keeps it), options_json ("" keeps
--       it): returns 1, -1 if the subscription is not live, -2 if another live one has the
--       new subscriber (nothing changed).
--   "confirm", now, id, confirmed (0 or 1): returns 1, or -1 if it is not live.
--   "list", now, marker ("" for the start), limit: {id, record, id, record, ...} of live
--       subscriptions after marker in id order (at most limit).
--   "delete", now, id: returns 1.
--   "purge", now: drops every subscription; returns 1.
--   "results", now, then four values per result: id, sent_ms, outcome, detail: each is kept
--       as that subscription's last push attempt (ids no longer stored are skipped).
--       Returns 1.
-- Subscriptions whose ttl ran out are never returned; creating one removes them.

local action, now = ARGV[1], tonumber(ARGV[2])

local function load_subscription(id)
    local raw = redis.call('HGET', K_SUBSCRIPTIONS, id)
    if not raw then
        return nil
    end
    local record = cmsgpack.unpack(raw)
    if record[S_EXPIRES] <= now then
        return nil
    end
    return record
end

local function remove_subscription(id)
    redis.call('HDEL', K_SUBSCRIPTIONS, id)
    redis.call('ZREM', K_SUBSCRIPTION_IDS, id)
    drop_parked(id)
end

-- The id of the live subscription with this subscriber, other than except_id; removes the
-- expired ones it meets (a queue has few subscriptions).
local function live_with_subscriber(subscriber, except_id)
    local flat = redis.call('HGETALL', K_SUBSCRIPTIONS)
    local found = nil
    for i = 1, #flat, 2 do
        local id, record = flat[i], cmsgpack.unpack(flat[i + 1])
        if record[S_EXPIRES] <= now then
            remove_subscription(id)
        elseif record[S_SUBSCRIBER] == subscriber and id ~= except_id then
            found = id
        end
    end
    return found
end

if action == 'create' then
    local id, subscriber, ttl = ARGV[3], ARGV[4], tonumber(ARGV[5])
    local existing = live_with_subscriber(subscriber, '')
    if existing then
        return {0, existing, 0}
    end
    local created = 0
    if redis.call('EXISTS', K_QUEUE) == 0 then
        redis.call('HSET', K_QUEUE, 'm', '{}', 'cr', now, 'seq', first_seq())
        created = 1
    end
    local record = {subscriber, ttl, now, now + ttl * 1000, 0, ARGV[6], ARGV[7]}
    redis.call('HSET', K_SUBSCRIPTIONS, id, cmsgpack.pack(record))
    redis.call('ZADD', K_SUBSCRIPTION_IDS, 0, id)
    return {1, id, created}
elseif action == 'update' or action == 'confirm' then
    local id = ARGV[3]
    local record = load_subscription(id)
    if not record then
        return -1
    end
    if action == 'confirm' then
        record[S_CONFIRMED] = tonumber(ARGV[4])
    else
        local subscriber, ttl, options = ARGV[4], tonumber(ARGV[5]), ARGV[6]
        if subscriber ~= '' and subscriber ~= record[S_SUBSCRIBER] then
            if live_with_subscriber(subscriber, id) then
                return -2
            end
            record[S_SUBSCRIBER] = subscriber
        end
        if ttl > 0 then
            record[S_TTL], record[S_STARTED], record[S_EXPIRES] = ttl, now, now + ttl * 1000
        end
        if options ~= '' then
            record[S_OPTIONS] = options
            -- Its limits may have changed: what they held back is owed again now.
            redis.call('HDEL', K_PUSH_LIMITS, id)
            unpark(id, redis.call('ZLEXCOUNT', K_PARKED, parked_range(id)))
        end
    end
    redis.call('HSET', K_SUBSCRIPTIONS, id, cmsgpack.pack(record))
    return 1
elseif action == 'results' then
    for i = 3, #ARGV, 4 do
        local raw = redis.call('HGET', K_SUBSCRIPTIONS, ARGV[i])
        if raw then
            local record = cmsgpack.unpack(raw)
            record[S_LAST] = {tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3]}
            redis.call('HSET', K_SUBSCRIPTIONS, ARGV[i], cmsgpack.pack(record))
        end
    end
    return 1
elseif action == 'list' then
    local start = ARGV[3] == '' and '-' or '(' .. ARGV[3]
    local limit = tonumber(ARGV[4])
    local out = {}
    -- Expired entries are skipped, so read in pages until the answer is full or the set ends.
    while #out < limit * 2 do
        local ids = redis.call('ZRANGEBYLEX', K_SUBSCRIPTION_IDS, start, '+', 'LIMIT', 0, limit)
        if #ids == 0 then
            break
        end
        for _, id in ipairs(ids) do
            local raw = redis.call('HGET', K_SUBSCRIPTIONS, id)
            if raw and cmsgpack.unpack(raw)[S_EXPIRES] > now and #out < limit * 2 then
                out[#out + 1] = id
                out[#out + 1] = raw
            end
            start = '(' .. id
        end
    end
    return out
elseif action == 'delete' then
    remove_subscription(ARGV[3])
    return 1
elseif action == 'purge' then
    redis.call('UNLINK', K_SUBSCRIPTIONS, K_SUBSCRIPTION_IDS, K_PUSH_LIMITS, K_PARKED)
    redis.call('ZREMRANGEBYSCORE', K_DELIVERIES, PARKED, '+inf')
    return 1
end
return redis.error_reply('unknown action ' .. action)
