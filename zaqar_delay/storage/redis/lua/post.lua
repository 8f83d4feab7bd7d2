-- post.lua: store a batch of messages at the tail of the queue, creating the queue if needed.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms, mode, client_id, expected, messages: one msgpack array holding seven values
--   per message, ref, ttl_s, delay_ms, body_json, dedup_id, hops, dedup_memory_s (one
--   argument, so the client encodes one value instead of seven per message).
--   dedup_id: "" for none. Otherwise, while the queue remembers it (for the dedup_memory_s
--             seconds of the message first posted with it: its ttl, or less), the message is
--             not stored and the first one's id is returned in its place; the first message
--             is remembered from here on, even after it is deleted.
--   expected: the version of the metadata the caller built the messages with (the SHA-1 of its
--             stored JSON text: storage.base.metadata_version_of), "" if it took the queue to be
--             missing, ANY_METADATA_VERSION to skip the check (dead-letter moves). When it does
--             not match, nothing is written and the script returns {-1, metadata_json or false}
--             so the caller can rebuild the messages with the current defaults and retry.
--   mode "new":  ref is a random suffix; the id is the 16-hex-digit sequence number followed by
--                it, so ids of one millisecond sort in posting order.
--   mode "keep": ref is the full id (dead-letter moves); an id already present is skipped, so a
--                repeated move stores the message once.
-- Every message a post stores (a dead letter moved in too) is owed a push to each live
-- subscription of the queue, at its due time (deliveries).
-- Returns: {created (1 if the queue was created), metadata SHA-1, the ids in order joined by ",",
--   the 0-based positions of messages that matched a remembered dedup_id joined by ",",
--   the earliest due time of the pushes it added (0 for none)}.

local now, mode, client, expected = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local metadata = redis.call('HGET', K_QUEUE, 'm')
local version = metadata and redis.sha1hex(metadata) or ''
if expected ~= ANY_METADATA_VERSION and expected ~= version then
    return {-1, metadata}
end
local created = 0
if not metadata then
    redis.call('HSET', K_QUEUE, 'm', '{}', 'cr', now, 'seq', first_seq())
    version = redis.sha1hex('{}')
    created = 1
end
collect_garbage(now)

local fields = cmsgpack.unpack(ARGV[5])
local count = #fields / 7
local last_seq = redis.call('HINCRBY', K_QUEUE, 'seq', count)
local stored_client = encode_client(client)
local records, bodies, earliest_expiry = {}, {}, {}  -- by bucket
local ready, owed, ids, duplicates = {}, {}, {}, {}
local stored, kept, earliest_due = 0, {}, nil
for j = 0, count - 1 do
    local base = 1 + j * 7
    local seq = last_seq - count + 1 + j
    local ref, ttl, dedup = fields[base], fields[base + 1], fields[base + 4]
    local info = {seq = seq, created = now, expires = now + ttl * 1000, ttl = ttl,
        due = now + fields[base + 2], count = 0, client = stored_client[1],
        hops = fields[base + 5]}
    local id
    if mode == 'new' then
        info.kind, info.ref = stored_client[2], from_hex(ref)
        id = message_id(info)
    else
        info.kind, info.ref, info.id = stored_client[2] + KIND_ID_KEPT, ref, ref
        id = ref
    end
    local store = mode == 'new' or load_info(id) == nil
    if store and dedup ~= '' then
        -- Garbage collection forgets lapsed ids only in batches, so check the expiry here.
        local remembered = redis.call('HGET', K_DEDUP, dedup)
        local first = remembered and cmsgpack.unpack(remembered)
        if first and first[2] > now then
            id = first[1]
            duplicates[#duplicates + 1] = j
            store = false
        else
            local forget = now + fields[base + 6] * 1000
            redis.call('HSET', K_DEDUP, dedup, cmsgpack.pack({id, forget}))
            redis.call('ZADD', K_DEDUP_EXPIRY, forget, dedup)
        end
    end
    if store then
        local bucket = bucket_of(seq)
        if not records[bucket] then
            records[bucket], bodies[bucket] = {}, {}
        end
        local field = decimal(seq)
        local in_records, in_bodies = records[bucket], bodies[bucket]
        in_records[#in_records + 1] = field
        in_records[#in_records + 1] = encode_record(info)
        in_bodies[#in_bodies + 1] = field
        in_bodies[#in_bodies + 1] = fields[base + 3]
        if earliest_expiry[bucket] == nil or info.expires < earliest_expiry[bucket] then
            earliest_expiry[bucket] = info.expires
        end
        ready[#ready + 1] = info.due
        if earliest_due == nil or info.due < earliest_due then
            earliest_due = info.due
        end
        ready[#ready + 1] = member_of(seq)
        owed[#owed + 1] = info.due
        owed[#owed + 1] = id
        if mode ~= 'new' then
            kept[#kept + 1] = id
            kept[#kept + 1] = field
        end
        stored = stored + 1
    end
    ids[#ids + 1] = id
end
if stored > 0 then
    for bucket, pairs_ in pairs(records) do
        bulk('HSET', records_key(bucket), pairs_)
        bulk('HSET', bodies_key(bucket), bodies[bucket])
        redis.call('ZADD', K_BUCKETS, bucket, bucket)
        redis.call('ZADD', K_EXPIRY, 'LT', earliest_expiry[bucket], bucket)
    end
    if #kept > 0 then
        bulk('HSET', K_ALIASES, kept)
    end
    wake_waiters_before_adding(earliest_due, now)
    bulk('ZADD', K_READY, ready)
    redis.call('HINCRBY', K_QUEUE, 'n', stored)
end
local first_push = 0
if #owed > 0 and redis.call('EXISTS', K_SUBSCRIPTIONS) == 1 then
    local pushes = {}
    for _, sid in ipairs(live_subscription_ids(now)) do
        for i = 1, #owed, 2 do
            pushes[#pushes + 1] = owed[i]
            pushes[#pushes + 1] = sid .. ':' .. owed[i + 1]
            if first_push == 0 or owed[i] < first_push then
                first_push = owed[i]
            end
        end
    end
    bulk('ZADD', K_DELIVERIES, pushes)
end
return {created, version, table.concat(ids, ','), table.concat(duplicates, ','), first_push}
