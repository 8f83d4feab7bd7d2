-- release_claim.lua: end a claim; its messages are claimable again at once, in their old place
-- (or after the queue's _retry_backoff, counted from now).
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms, claim_id.
-- Returns: the number of messages released (0 for an unknown or expired claim).
-- Claim counts are kept, so released messages still progress toward the dead-letter queue.

local now, cid = tonumber(ARGV[1]), ARGV[2]
local claim = load_live_claim(cid, now)
redis.call('HDEL', K_CLAIMS, cid)
redis.call('ZREM', K_CLAIM_EXPIRY, cid)
if not claim then
    return 0
end
local infos = held_messages(cid, claim, now)
for _, info in ipairs(infos) do
    unclaim(info, redelivery_due(info, now))
end
if #infos > 0 then
    wake_waiters()
end
return #infos
