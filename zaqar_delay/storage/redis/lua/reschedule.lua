-- reschedule.lua: move a message's due time; a claimed message also leaves its claim.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms, message_id, claim_id ("" when the caller named none), due_ms.
-- Returns: "ok", "missing" (no such unexpired message) or a claim_check refusal (lib.lua).
-- The message keeps its claim count and expiry; it is not claimable before due_ms.

local now, id, cid, due = tonumber(ARGV[1]), ARGV[2], ARGV[3], tonumber(ARGV[4])
local info = load_info(id)
if not info or info.expires <= now then
    return 'missing'
end
local refusal = claim_check(info, cid, now)
if refusal ~= '' then
    return refusal
end
unclaim(info, due)
wake_waiters()
return 'ok'
