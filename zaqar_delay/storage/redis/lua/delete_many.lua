-- delete_many.lua: delete messages by id, all or nothing.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms, claim_check (1/0), claim_count, claim ids..., message ids...
--   With claim_check 1, a message held by a live claim must be held by one of the claim ids.
-- Returns: "ok", or "claimed" (nothing deleted) when the claim check fails.

local now, check, n = tonumber(ARGV[1]), ARGV[2] == '1', tonumber(ARGV[3])
local allowed = {}
for i = 4, 3 + n do
    allowed[ARGV[i]] = true
end
local infos = {}
for i = 4 + n, #ARGV do
    infos[#infos + 1] = load_info(ARGV[i])
end
if check then
    for _, info in ipairs(infos) do
        if is_live_claim(info, now) and not allowed[info.claim] then
            return REFUSED_CLAIMED
        end
    end
end
remove_messages(infos)
return 'ok'
