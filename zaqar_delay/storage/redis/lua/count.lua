-- count.lua: how many messages the queue stores, for a project's message quota.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms.
-- Returns: the queue's stored messages, once up to COUNT_GC_BUCKETS of its buckets holding
--   expired messages are collected (a queue with more of them counts the rest until later
--   calls, posts or stats collect them); 0 for a missing queue.

local COUNT_GC_BUCKETS = 64
collect_expired(tonumber(ARGV[1]), COUNT_GC_BUCKETS)
return tonumber(redis.call('HGET', K_QUEUE, 'n') or '0')
