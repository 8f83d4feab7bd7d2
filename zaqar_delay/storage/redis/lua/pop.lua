-- pop.lua: remove and return up to `limit` claimable messages, oldest due first.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms, limit.
-- Returns: {id, body, info, ...} of the removed messages, their claim count raised by the pop
--   (a pop is a delivery, as a claim is).

local now, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local out, ids = {}, {}
take_claimable(now, limit, function(id, info)
    info[I_CLAIM_COUNT] = info[I_CLAIM_COUNT] + 1
    emit(out, id, info)
    ids[#ids + 1] = id
end)
remove_messages(ids)
return out
