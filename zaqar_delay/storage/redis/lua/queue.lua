-- queue.lua: create a queue, replace its metadata, purge it or delete it.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: action, now_ms, then metadata_json ("create", "set", "put") or, for "purge" and
--   "delete", UNLINK_INDEXES when big indexes are to be unlinked whole (removal.py).
--   "create":  store the queue with metadata_json unless it exists; returns 1 if created.
--   "set":     replace the metadata of an existing queue; returns 0 if the queue is missing.
--   "put":     "set", or "create" when the queue is missing; returns 1 if created.
--   "purge":   drop every message, claim and remembered dedup id, keep the queue.
--   "delete":  drop the queue with its messages, claims, dedup ids, subscriptions and owed
--              pushes.
--   "sweep":   free a slice of the trash (SWEEP_ENTRIES index entries, SWEEP_BUCKETS buckets).
-- "purge", "delete" and "sweep" return how much of the trash is left to free (non-zero: call
-- "sweep" again): the messages are gone at once, their buckets and big indexes are freed by
-- "sweep" calls (removal.py), so no call holds the store for long.

local action = ARGV[1]
if action == 'sweep' then
    return free_trash(SWEEP_ENTRIES, SWEEP_BUCKETS)
end
local exists = redis.call('EXISTS', K_QUEUE) == 1
if action == 'put' then
    action = exists and 'set' or 'create'
end
if action == 'create' then
    if exists then
        return 0
    end
    redis.call('HSET', K_QUEUE, 'm', ARGV[3], 'cr', tonumber(ARGV[2]), 'seq', first_seq())
    return 1
elseif action == 'set' then
    if not exists then
        return 0
    end
    redis.call('HSET', K_QUEUE, 'm', ARGV[3])
    return ARGV[1] == 'put' and 0 or 1
end
trash_buckets()
local unlink = ARGV[3] == UNLINK_INDEXES
for _, index in ipairs({{K_READY, 'z'}, {K_CLAIMED, 'z'}, {K_EXPIRY, 'z'}, {K_HOLDERS, 'h'},
        {K_ALIASES, 'h'}, {K_CLAIMS, 'h'}, {K_CLAIM_EXPIRY, 'z'}, {K_DEDUP, 'h'},
        {K_DEDUP_EXPIRY, 'z'}}) do
    drop_index(index[1], index[2], unlink)
end
if exists then
    -- Sequence numbers go on past the trashed buckets: the next message starts a new bucket.
    local seq = tonumber(redis.call('HGET', K_QUEUE, 'seq')) or 0
    redis.call('HSET', K_QUEUE, 'n', 0, 'seq', math.max(seq, first_seq()))
end
if action == 'delete' then
    for _, index in ipairs({{K_QUEUE, 'h'}, {K_SUBSCRIPTIONS, 'h'}, {K_SUBSCRIPTION_IDS, 'z'},
            {K_DELIVERIES, 'z'}, {K_DELIVERY_INFO, 'h'}, {K_PUSH_LIMITS, 'h'}, {K_PARKED, 'z'}}) do
        drop_index(index[1], index[2], unlink)
    end
end
return trash_size()
