-- next_claimable.lua: when the next message may become claimable, for waiting claims.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms.
-- Returns: the earliest of the next due time (ready set) and the next claim expiry (claimed
--   set) after now_ms, or 0 when neither exists. An expired entry may make it early: a
--   waiting claim then just finds nothing and waits again.

local window = '(' .. ARGV[1]
local earliest = 0
for _, key in ipairs({K_READY, K_CLAIMED}) do
    local entry = redis.call('ZRANGEBYSCORE', key, window, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if #entry > 0 then
        local score = tonumber(entry[2])
        if earliest == 0 or score < earliest then
            earliest = score
        end
    end
end
return earliest
