-- upgrade.lua: move up to `batch` messages of a queue from the layout of zaqar-delay 1.x (one
-- hash entry and up to four sorted-set entries per message) into the buckets (lib.lua).
--
-- KEYS: the queue keys (lib.lua), then the queue's keys of the old layout: bodies (HASH id
--   -> body), infos (HASH id -> msgpack [created, expires, ttl, due, client, seq, claim,
--   claim_expires, claim_count]), fifo (ZSET id by seq), ready (ZSET id by due), claimed
--   (ZSET id by claim expiry), expiry (ZSET id by expiry ms).
-- ARGV: batch.
-- Returns: the number of messages still in the old layout (0 when the queue is done; its old
--   keys are then gone).
-- Ids, bodies, due times, claims and claim counts are kept. The claim records are rewritten
-- first (their message ids become sequence numbers), while every id still has its sequence.

local O_BODIES, O_INFOS, O_FIFO = KEYS[QUEUE_KEYS + 1], KEYS[QUEUE_KEYS + 2], KEYS[QUEUE_KEYS + 3]
local O_READY, O_CLAIMED, O_EXPIRY = KEYS[QUEUE_KEYS + 4], KEYS[QUEUE_KEYS + 5], KEYS[QUEUE_KEYS + 6]
local batch = tonumber(ARGV[1])

if redis.call('EXISTS', O_FIFO) == 0 then
    redis.call('UNLINK', O_BODIES, O_INFOS, O_READY, O_CLAIMED, O_EXPIRY)
    return 0
end

local claims = redis.call('HGETALL', K_CLAIMS)
for i = 1, #claims, 2 do
    local claim = cmsgpack.unpack(claims[i + 1])
    local changed = false
    for j = #claim, C_FIRST_SEQ, -1 do
        if type(claim[j]) == 'string' then
            local seq = redis.call('ZSCORE', O_FIFO, claim[j])
            if seq then
                claim[j] = tonumber(seq)
            else
                table.remove(claim, j)
            end
            changed = true
        end
    end
    if changed then
        redis.call('HSET', K_CLAIMS, claims[i], cmsgpack.pack(claim))
    end
end

local entries = redis.call('ZRANGE', O_FIFO, 0, batch - 1, 'WITHSCORES')
local ids, moved = {}, 0
for i = 1, #entries, 2 do
    local id, seq = entries[i], tonumber(entries[i + 1])
    ids[#ids + 1] = id
    local raw, body = redis.call('HGET', O_INFOS, id), redis.call('HGET', O_BODIES, id)
    if raw and body then
        local old = cmsgpack.unpack(raw)
        local client = encode_client(old[5])
        local info = {seq = seq, created = old[1], expires = old[2], ttl = old[3], due = old[4],
            count = old[9], client = client[1], kind = client[2]}
        if #id == 32 and string.sub(id, 1, 16) == string.format('%016x', seq)
            and not string.find(id, '[^0-9a-f]') then
            info.ref = from_hex(string.sub(id, 17))
        else
            info.kind, info.ref = info.kind + KIND_ID_KEPT, id
            redis.call('HSET', K_ALIASES, id, decimal(seq))
        end
        local bucket = bucket_of(seq)
        store_info(info)
        redis.call('HSET', bodies_key(bucket), decimal(seq), body)
        redis.call('ZADD', K_BUCKETS, bucket, bucket)
        redis.call('ZADD', K_EXPIRY, 'LT', info.expires, bucket)
        local claim_expires = redis.call('ZSCORE', O_CLAIMED, id)
        if claim_expires and old[7] ~= '' then
            hold(info, old[7], tonumber(claim_expires))
        else
            local due = redis.call('ZSCORE', O_READY, id)
            redis.call('ZADD', K_READY, due and tonumber(due) or info.due, member_of(seq))
        end
        moved = moved + 1
    end
end
bulk('HDEL', O_BODIES, ids)
bulk('HDEL', O_INFOS, ids)
bulk('ZREM', O_FIFO, ids)
bulk('ZREM', O_READY, ids)
bulk('ZREM', O_CLAIMED, ids)
bulk('ZREM', O_EXPIRY, ids)
if moved > 0 then
    redis.call('HINCRBY', K_QUEUE, 'n', moved)
end
local left = redis.call('ZCARD', O_FIFO)
if left == 0 then
    redis.call('UNLINK', O_BODIES, O_INFOS, O_READY, O_CLAIMED, O_EXPIRY)
end
return left
