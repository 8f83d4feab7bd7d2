-- delete.lua: delete one message, honouring its claim.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms, message_id, claim_id ("" when the caller named none).
-- Returns: "deleted" (an unexpired message was removed), "ok" (nothing to delete: missing, or
--   expired, which is removed as the reaper would) or a claim_check refusal (lib.lua).

local now, id, cid = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local info = load_info(id)
if not info or info.expires <= now then
    if info then
        remove_messages({info})
    end
    return 'ok'
end
local refusal = claim_check(info, cid, now)
if refusal ~= '' then
    return refusal
end
remove_messages({info})
return 'deleted'
