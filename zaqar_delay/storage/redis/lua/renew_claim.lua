-- renew_claim.lua: restart a live claim with a new ttl and grace.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms, claim_id, ttl_s, grace_s.
-- Returns: 1 when renewed, 0 when the claim is unknown, released or expired.
-- The claim keeps its messages and their claim counts; the lifetime extension is reapplied.

local now, cid = tonumber(ARGV[1]), ARGV[2]
local ttl, grace = tonumber(ARGV[3]), tonumber(ARGV[4])
local claim = load_live_claim(cid, now)
if not claim then
    return 0
end
local expires = now + ttl * 1000
local seqs = {}
for _, info in ipairs(held_messages(cid, claim, now)) do
    hold(info, cid, expires)
    extend_lifetime(info, expires, ttl, grace)
    store_info(info)
    seqs[#seqs + 1] = info.seq
end
redis.call('HSET', K_CLAIMS, cid, cmsgpack.pack({ttl, grace, now, expires, unpack(seqs)}))
redis.call('ZADD', K_CLAIM_EXPIRY, expires, cid)
return 1
