-- pop.lua: remove and return up to `limit` claimable messages, oldest due first.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms, limit.
-- Returns: {id, body, info, ...} of the removed messages.

local now, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local out, ids = {}, {}
take_claimable(now, limit, function(id, info)
    emit(out, id, info)
    ids[#ids + 1] = id
end)
remove_messages(ids)
return out
