-- delete.lua: delete one message, honouring its claim.
--
-- KEYS: the nine queue keys (lib.lua).
-- ARGV: now_ms, message_id, claim_id ("" when the caller named none).
-- Returns: "ok" (deleted, or nothing to delete), "claimed" (a live claim other than the named
--   one holds it), "not_claimed" (a claim was named but none holds the message), or
--   "bad_claim" (the named claim is not live and another live claim holds the message).

local now, id, cid = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local info = load_info(id)
if not info or info[I_EXPIRES] <= now then
    if info then
        remove_messages({id})
    end
    return 'ok'
end
local live = is_live_claim(info, now)
if cid == '' then
    if live then
        return 'claimed'
    end
elseif not live then
    return 'not_claimed'
elseif info[I_CLAIM] ~= cid then
    if load_live_claim(cid, now) then
        return 'claimed'
    end
    return 'bad_claim'
end
remove_messages({id})
return 'ok'
