-- get_claim.lua: a live claim and the messages it still holds.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms, claim_id.
-- Returns: false when the claim is unknown, released or expired; else
--   {ttl, grace, updated_ms, expires_ms, {id, body, record, claim, claim expiry, ...}}.

local now, cid = tonumber(ARGV[1]), ARGV[2]
local claim = load_live_claim(cid, now)
if not claim then
    return false
end
local out = {}
for _, info in ipairs(held_messages(cid, claim, now)) do
    emit(out, info)
end
return {claim[C_TTL], claim[C_GRACE], claim[C_UPDATED], claim[C_EXPIRES], out}
