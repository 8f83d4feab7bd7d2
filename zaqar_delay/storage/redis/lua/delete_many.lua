-- delete_many.lua: delete messages by id, all or nothing.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms, claim_check (1/0), claim_count, claim ids..., message ids...
--   With claim_check 1, a message held by a live claim must be held by one of the claim ids.
-- Returns: the ids of the unexpired messages removed (each message once, as first named), or
--   "claimed" (nothing deleted) when the claim check fails. Expired ones are removed too,
--   unreported.

local now, check, n = tonumber(ARGV[1]), ARGV[2] == '1', tonumber(ARGV[3])
local allowed = {}
for i = 4, 3 + n do
    allowed[ARGV[i]] = true
end
local infos, removed, seen = {}, {}, {}
for i = 4 + n, #ARGV do
    local id = ARGV[i]
    local info = load_info(id)
    if info then
        infos[#infos + 1] = info
        if info.expires > now and not seen[info.seq] then
            removed[#removed + 1] = id
            seen[info.seq] = true
        end
    end
end
if check then
    for _, info in ipairs(infos) do
        if is_live_claim(info, now) and not allowed[info.claim] then
            return REFUSED_CLAIMED
        end
    end
end
remove_messages(infos)
return removed
