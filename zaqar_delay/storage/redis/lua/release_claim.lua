-- release_claim.lua: end a claim; its messages are claimable again at once, in their old place.
--
-- KEYS: the nine queue keys (lib.lua).
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
local ids, infos = held_messages(cid, claim, now)
for i, id in ipairs(ids) do
    local info = infos[i]
    info[I_CLAIM] = ''
    info[I_CLAIM_EXPIRES] = 0
    store_info(id, info)
    redis.call('ZREM', K_CLAIMED, id)
    redis.call('ZADD', K_READY, info[I_DUE], id)
end
return #ids
