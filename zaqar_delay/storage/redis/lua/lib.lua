-- lib.lua: helpers shared by every queue script; scripts.py prepends it to each script.
--
-- KEYS (every queue script): the nineteen keys of one queue, in QueueKeys order (keys.py):
--   1 queue   2 bodies   3 infos   4 fifo   5 ready   6 claimed   7 expiry   8 claims
--   9 claim_expiry   10 waiters   11 wake (a pub/sub channel, passed with the keys so it
--   shares their cluster slot)   12 dedup   13 dedup_expiry   14 subscriptions
--   15 subscription_ids   16 deliveries   17 delivery_info   18 push_limits   19 parked
-- Times are epoch milliseconds handed in through ARGV; scripts never read the server clock,
-- so a test clock drives them exactly like the real one.

local K_QUEUE, K_BODIES, K_INFOS, K_FIFO = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_READY, K_CLAIMED, K_EXPIRY = KEYS[5], KEYS[6], KEYS[7]
local K_CLAIMS, K_CLAIM_EXPIRY = KEYS[8], KEYS[9]
local K_WAITERS, K_WAKE = KEYS[10], KEYS[11]
local K_DEDUP, K_DEDUP_EXPIRY = KEYS[12], KEYS[13]
local K_SUBSCRIPTIONS, K_SUBSCRIPTION_IDS = KEYS[14], KEYS[15]
local K_DELIVERIES, K_DELIVERY_INFO = KEYS[16], KEYS[17]
local K_PUSH_LIMITS, K_PARKED = KEYS[18], KEYS[19]

-- Positions in a message info array (msgpack).
local I_CREATED, I_EXPIRES, I_TTL, I_DUE, I_CLIENT, I_SEQ = 1, 2, 3, 4, 5, 6
local I_CLAIM, I_CLAIM_EXPIRES, I_CLAIM_COUNT = 7, 8, 9

-- Positions in a claim record (msgpack); message ids follow from C_FIRST_ID on.
local C_TTL, C_GRACE, C_UPDATED, C_EXPIRES, C_FIRST_ID = 1, 2, 3, 4, 5

-- Positions in a subscription record (msgpack).
local S_SUBSCRIBER, S_TTL, S_STARTED, S_EXPIRES, S_CONFIRMED = 1, 2, 3, 4, 5
local S_OPTIONS, S_SECRET = 6, 7

-- How much garbage one call may collect, so no call blocks Redis for long.
local GC_BUDGET = 100
local LAPSED_BUDGET = 1000
-- Lua's unpack() has a small stack; bulk commands are sent in chunks of this many arguments.
local CHUNK = 2000

-- Tell waiting claims that a message may have become claimable, or that the earliest due
-- time moved. Costs one EXISTS when no server is waiting on this queue.
local function wake_waiters()
    if redis.call('EXISTS', K_WAITERS) == 1 then
        redis.call('PUBLISH', K_WAKE, '')
    end
end

local function load_info(id)
    local raw = redis.call('HGET', K_INFOS, id)
    if not raw then
        return nil
    end
    return cmsgpack.unpack(raw)
end

local function store_info(id, info)
    redis.call('HSET', K_INFOS, id, cmsgpack.pack(info))
end

local function is_live_claim(info, now)
    return info[I_CLAIM] ~= '' and info[I_CLAIM_EXPIRES] > now
end

-- Send cmd key a1 a2 ... in chunks (args is a flat list).
local function bulk(cmd, key, args)
    for i = 1, #args, CHUNK do
        redis.call(cmd, key, unpack(args, i, math.min(i + CHUNK - 1, #args)))
    end
end

local function remove_messages(ids)
    if #ids == 0 then
        return
    end
    bulk('HDEL', K_BODIES, ids)
    bulk('HDEL', K_INFOS, ids)
    bulk('ZREM', K_FIFO, ids)
    bulk('ZREM', K_READY, ids)
    bulk('ZREM', K_CLAIMED, ids)
    bulk('ZREM', K_EXPIRY, ids)
end

-- Delete messages that expired, counting them in the queue's "expired" tally (for metrics).
local function remove_expired(ids)
    if #ids > 0 then
        remove_messages(ids)
        if redis.call('EXISTS', K_QUEUE) == 1 then
            redis.call('HINCRBY', K_QUEUE, 'expired', #ids)
        end
    end
end

-- Delete `key` hash fields whose score in `expiry_key` is due (at most GC_BUDGET).
local function forget_lapsed(key, expiry_key, now)
    local names = redis.call('ZRANGEBYSCORE', expiry_key, '-inf', now, 'LIMIT', 0, GC_BUDGET)
    if #names > 0 then
        bulk('HDEL', key, names)
        bulk('ZREM', expiry_key, names)
    end
end

-- Delete messages, claim records and remembered dedup ids whose time is over (at most
-- GC_BUDGET of each).
local function collect_garbage(now)
    remove_expired(redis.call('ZRANGEBYSCORE', K_EXPIRY, '-inf', now, 'LIMIT', 0, GC_BUDGET))
    forget_lapsed(K_CLAIMS, K_CLAIM_EXPIRY, now)
    forget_lapsed(K_DEDUP, K_DEDUP_EXPIRY, now)
end

-- The queue's metadata as a table (empty when missing or unreadable), read once per call.
local metadata_cache = nil
local function queue_metadata()
    if metadata_cache == nil then
        metadata_cache = {}
        local raw = redis.call('HGET', K_QUEUE, 'm')
        if raw then
            local ok, decoded = pcall(cjson.decode, raw)
            if ok and type(decoded) == 'table' then
                metadata_cache = decoded
            end
        end
    end
    return metadata_cache
end

-- When a message whose claim ended (released at `base`, or ran out at `base`) is claimable
-- again: its original due time, keeping its place in line, unless the queue has a
-- _retry_backoff policy: then base + min(max, initial * factor ^ (claim_count - 1)) seconds.
local function redelivery_due(info, base)
    local policy = queue_metadata()['_retry_backoff']
    if type(policy) ~= 'table' or type(policy['initial']) ~= 'number'
        or type(policy['factor']) ~= 'number' or type(policy['max']) ~= 'number' then
        return info[I_DUE]
    end
    local exponent = math.max(info[I_CLAIM_COUNT] - 1, 0)
    local seconds = math.min(policy['max'], policy['initial'] * policy['factor'] ^ exponent)
    return base + math.floor(seconds * 1000)
end

-- Make a message that left its claim unclaimed again, due at `due`.
local function unclaim(id, info, due)
    info[I_DUE] = due
    info[I_CLAIM] = ''
    info[I_CLAIM_EXPIRES] = 0
    store_info(id, info)
    redis.call('ZREM', K_CLAIMED, id)
    redis.call('ZADD', K_READY, due, id)
end

-- Return messages whose claim ran out to the ready set (see redelivery_due).
local function return_lapsed_claims(now)
    local ids = redis.call('ZRANGEBYSCORE', K_CLAIMED, '-inf', now, 'LIMIT', 0, LAPSED_BUDGET)
    for _, id in ipairs(ids) do
        local info = load_info(id)
        if info then
            unclaim(id, info, redelivery_due(info, info[I_CLAIM_EXPIRES]))
        else
            redis.call('ZREM', K_CLAIMED, id)
        end
    end
end

-- Visit up to `limit` claimable messages (due, unexpired, no live claim), oldest due first.
-- Each visited id has already left the ready set; visit(id, info) decides what becomes of it.
-- Expired or vanished entries met on the way are deleted and do not count.
local function take_claimable(now, limit, visit)
    collect_garbage(now)
    return_lapsed_claims(now)
    local taken = 0
    while taken < limit do
        local ids = redis.call('ZRANGEBYSCORE', K_READY, '-inf', now, 'LIMIT', 0, limit - taken)
        if #ids == 0 then
            break
        end
        for _, id in ipairs(ids) do
            redis.call('ZREM', K_READY, id)
            local info = load_info(id)
            if info and info[I_EXPIRES] > now then
                visit(id, info)
                taken = taken + 1
            elseif info then
                remove_expired({id})
            else
                remove_messages({id})
            end
        end
    end
end

-- A claimed message that would expire before its claim lives until claim expiry + grace.
local function extend_lifetime(id, info, claim_expires, ttl, grace)
    if info[I_EXPIRES] < claim_expires then
        info[I_EXPIRES] = claim_expires + grace * 1000
        info[I_TTL] = ttl + grace
        redis.call('ZADD', K_EXPIRY, info[I_EXPIRES], id)
    end
end

-- The live claim record as a table, or nil when unknown or expired.
local function load_live_claim(cid, now)
    local raw = redis.call('HGET', K_CLAIMS, cid)
    if not raw then
        return nil
    end
    local claim = cmsgpack.unpack(raw)
    if claim[C_EXPIRES] <= now then
        return nil
    end
    return claim
end

-- May the caller, naming claim `cid` ("" for none), change this message? "" when it may;
-- else "claimed" (a live claim other than the named one holds it), "not_claimed" (a claim was
-- named but none holds the message) or "bad_claim" (the named claim is not live and another
-- live claim holds the message).
local function claim_check(info, cid, now)
    local live = is_live_claim(info, now)
    if cid == '' then
        if live then
            return 'claimed'
        end
        return ''
    end
    if not live then
        return 'not_claimed'
    end
    if info[I_CLAIM] ~= cid then
        if load_live_claim(cid, now) then
            return 'claimed'
        end
        return 'bad_claim'
    end
    return ''
end

-- Ids of the claim's messages that the claim still holds, with their infos.
local function held_messages(cid, claim, now)
    local ids, infos = {}, {}
    for i = C_FIRST_ID, #claim do
        local id = claim[i]
        local info = load_info(id)
        if info and info[I_CLAIM] == cid and is_live_claim(info, now) then
            ids[#ids + 1] = id
            infos[#infos + 1] = info
        end
    end
    return ids, infos
end

-- Whether a listing shows this message to `client`: it exists, has not expired, and was
-- posted by another client unless `echo`.
local function listable(info, now, client, echo)
    return info and info[I_EXPIRES] > now and (echo or info[I_CLIENT] ~= client)
end

-- Append id, body, info triples of messages to `out`.
local function emit(out, id, info)
    out[#out + 1] = id
    out[#out + 1] = redis.call('HGET', K_BODIES, id)
    out[#out + 1] = cmsgpack.pack(info)
end

-- The ids of the queue's live subscriptions (a queue has few).
local function live_subscription_ids(now)
    local flat = redis.call('HGETALL', K_SUBSCRIPTIONS)
    local ids = {}
    for i = 1, #flat, 2 do
        if cmsgpack.unpack(flat[i + 1])[S_EXPIRES] > now then
            ids[#ids + 1] = flat[i]
        end
    end
    return ids
end

-- The ms of the queue's earliest owed push (a due time or a lease's end), or 0 for none.
-- A push parked by its subscription's concurrency limit stays in K_DELIVERIES (it is still
-- owed: _delete_after_push sees it) at PARKED + its owed time, which is never due.
local PARKED = 2 ^ 51

-- The earliest owed push that is not parked (0 for none).
local function earliest_push()
    local first = redis.call('ZRANGE', K_DELIVERIES, 0, 0, 'WITHSCORES')
    local score = first[2] and tonumber(first[2]) or 0
    return score < PARKED and score or 0
end

-- The range of K_PARKED entries of one subscription ('|' < '}').
local function parked_range(sid)
    return '[' .. sid .. '|', '(' .. sid .. '}'
end

-- Put back up to n parked pushes of subscription sid, oldest first, owed as before; returns
-- the earliest owed time put back (0 for none).
local function unpark(sid, n)
    local low, high = parked_range(sid)
    local entries = redis.call('ZRANGEBYLEX', K_PARKED, low, high, 'LIMIT', 0, n)
    local earliest = 0
    for _, entry in ipairs(entries) do
        local owed = tonumber(string.sub(entry, #sid + 2, #sid + 17), 16)
        local delivery = sid .. ':' .. string.sub(entry, #sid + 19)
        redis.call('ZREM', K_PARKED, entry)
        if redis.call('ZADD', K_DELIVERIES, 'XX', 'CH', owed, delivery) == 1 then
            earliest = (earliest == 0 or owed < earliest) and owed or earliest
        end
    end
    return earliest
end

-- Forget subscription sid's dispatch limits and drop its parked pushes (it is gone).
local function drop_parked(sid)
    local low, high = parked_range(sid)
    local entries = redis.call('ZRANGEBYLEX', K_PARKED, low, high)
    for _, entry in ipairs(entries) do
        local delivery = sid .. ':' .. string.sub(entry, #sid + 19)
        redis.call('ZREM', K_DELIVERIES, delivery)
        redis.call('HDEL', K_DELIVERY_INFO, delivery)
    end
    redis.call('ZREMRANGEBYLEX', K_PARKED, low, high)
    redis.call('HDEL', K_PUSH_LIMITS, sid)
end
