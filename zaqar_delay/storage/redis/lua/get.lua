-- get.lua: messages by id, delayed and claimed ones included, expired ones left out.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms, id, id, ...
-- Returns: {id, body, record, claim, claim expiry, ...} (lib.lua's emit) for the ids found, in ARGV order.

local now = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV do
    local info = load_info(ARGV[i])
    if info and info.expires > now then
        emit(out, info)
    end
end
return out
