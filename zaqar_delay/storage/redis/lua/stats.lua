-- stats.lua: message counts of a queue and its oldest and newest unexpired messages.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms.
-- Returns: {total, claimed, delayed, next_due, oldest_id, oldest_created, newest_id,
--   newest_created, expired} (ids "" when the queue holds no message; next_due 0 when nothing
--   is delayed; expired: messages deleted on expiry so far). Delayed messages count in total,
--   as Zaqar's do.
-- The total is the count of stored messages once the expired ones are collected; at most
-- STATS_GC_BUCKETS buckets are collected here, so a queue where more than that many buckets
-- hold expired messages counts some of them until later calls collect them.

local STATS_GC_BUCKETS = 256
local now = tonumber(ARGV[1])
collect_garbage(now)
collect_expired(now, STATS_GC_BUCKETS)
local window = '(' .. now
local total = tonumber(redis.call('HGET', K_QUEUE, 'n') or '0')
local claimed = redis.call('ZCOUNT', K_CLAIMED, window, '+inf')
local delayed = redis.call('ZCOUNT', K_READY, window, '+inf')

-- The first unexpired message from one end of the posting order.
local function first_alive(from_tail)
    local offset = 0
    while true do
        local buckets
        if from_tail then
            buckets = redis.call('ZREVRANGE', K_BUCKETS, offset, offset)
        else
            buckets = redis.call('ZRANGE', K_BUCKETS, offset, offset)
        end
        if #buckets == 0 then
            return '', 0
        end
        local flat = redis.call('HGETALL', records_key(tonumber(buckets[1])))
        local best = nil
        for i = 1, #flat, 2 do
            local info = decode_record(tonumber(flat[i]), flat[i + 1])
            if info.expires > now and (best == nil
                or (from_tail and info.seq > best.seq) or (not from_tail and info.seq < best.seq)) then
                best = info
            end
        end
        if best then
            return message_id(best), best.created
        end
        offset = offset + 1
    end
end

-- The earliest due time among unexpired delayed messages.
local function next_due()
    local offset = 0
    while true do
        local entries = redis.call('ZRANGEBYSCORE', K_READY, window, '+inf', 'WITHSCORES', 'LIMIT', offset, 100)
        if #entries == 0 then
            return 0
        end
        for i = 1, #entries, 2 do
            local info = load_seq(seq_of_member(entries[i]))
            if info and info.expires > now then
                return tonumber(entries[i + 1])
            end
        end
        offset = offset + 100
    end
end

local oldest_id, oldest_created = first_alive(false)
local newest_id, newest_created = first_alive(true)
local expired = tonumber(redis.call('HGET', K_QUEUE, 'expired') or '0')
return {total, claimed, delayed, next_due(), oldest_id, oldest_created, newest_id, newest_created, expired}
