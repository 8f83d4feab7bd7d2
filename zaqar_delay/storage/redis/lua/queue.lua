-- queue.lua: create a queue, replace its metadata, purge it or delete it.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: action, now_ms, metadata_json.
--   "create":  store the queue with metadata_json unless it exists; returns 1 if created.
--   "set":     replace the metadata of an existing queue; returns 0 if the queue is missing.
--   "put":     "set", or "create" when the queue is missing; returns 1 if created.
--   "purge":   drop every message, claim and remembered dedup id, keep the queue; returns 1.
--   "delete":  drop the queue with its messages, claims, dedup ids, subscriptions and owed
--              pushes; returns 1.

local action = ARGV[1]
local exists = redis.call('EXISTS', K_QUEUE) == 1
if action == 'put' then
    action = exists and 'set' or 'create'
end
if action == 'create' then
    if exists then
        return 0
    end
    redis.call('HSET', K_QUEUE, 'm', ARGV[3], 'cr', tonumber(ARGV[2]), 'seq', 0)
    return 1
elseif action == 'set' then
    if not exists then
        return 0
    end
    redis.call('HSET', K_QUEUE, 'm', ARGV[3])
    return ARGV[1] == 'put' and 0 or 1
end
local buckets = redis.call('ZRANGE', K_BUCKETS, 0, -1)
local bucket_keys = {}
for _, bucket in ipairs(buckets) do
    bucket_keys[#bucket_keys + 1] = records_key(tonumber(bucket))
    bucket_keys[#bucket_keys + 1] = bodies_key(tonumber(bucket))
end
bulk('UNLINK', K_READY, bucket_keys)
redis.call('UNLINK', K_BUCKETS, K_READY, K_CLAIMED, K_EXPIRY, K_HOLDERS, K_ALIASES, K_CLAIMS,
    K_CLAIM_EXPIRY, K_DEDUP, K_DEDUP_EXPIRY)
if exists then
    redis.call('HSET', K_QUEUE, 'n', 0)
end
if action == 'delete' then
    redis.call('UNLINK', K_QUEUE, K_SUBSCRIPTIONS, K_SUBSCRIPTION_IDS, K_DELIVERIES, K_DELIVERY_INFO,
        K_PUSH_LIMITS, K_PARKED)
end
return 1
