-- pop.lua: remove and return up to `limit` claimable messages, oldest due first.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms, limit.
-- Returns: {id, body, record, claim, claim expiry, ...} (lib.lua's emit) of the removed messages, their claim count raised by the pop
--   (a pop is a delivery, as a claim is).

local now, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local out, infos = {}, {}
take_claimable(now, limit, function(info)
    info.count = info.count + 1
    emit(out, info)
    infos[#infos + 1] = info
end)
remove_messages(infos)
return out
