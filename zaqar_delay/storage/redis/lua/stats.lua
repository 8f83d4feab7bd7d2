-- stats.lua: message counts of a queue and its oldest and newest unexpired messages.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms.
-- Returns: {total, claimed, delayed, next_due, oldest_id, oldest_created, newest_id,
--   newest_created, expired} (ids "" when the queue holds no message; next_due 0 when nothing
--   is delayed; expired: messages deleted on expiry so far). Delayed messages count in total,
--   as Zaqar's do.

local now = tonumber(ARGV[1])
collect_garbage(now)
local window = '(' .. now
local total = redis.call('ZCOUNT', K_EXPIRY, window, '+inf')
local claimed = redis.call('ZCOUNT', K_CLAIMED, window, '+inf')
local delayed = redis.call('ZCOUNT', K_READY, window, '+inf')

-- The first unexpired message from one end of the posting order.
local function first_alive(from_tail)
    local offset = 0
    while true do
        local ids
        if from_tail then
            ids = redis.call('ZREVRANGE', K_FIFO, offset, offset + 99)
        else
            ids = redis.call('ZRANGE', K_FIFO, offset, offset + 99)
        end
        if #ids == 0 then
            return '', 0
        end
        for _, id in ipairs(ids) do
            local info = load_info(id)
            if info and info[I_EXPIRES] > now then
                return id, info[I_CREATED]
            end
        end
        offset = offset + 100
    end
end

-- The earliest due time among unexpired delayed messages.
local function next_due()
    local offset = 0
    while true do
        local entries = redis.call('ZRANGEBYSCORE', K_READY, window, '+inf', 'WITHSCORES', 'LIMIT', offset, 100)
        if #entries == 0 then
            return 0
        end
        for i = 1, #entries, 2 do
            local info = load_info(entries[i])
            if info and info[I_EXPIRES] > now then
                return tonumber(entries[i + 1])
            end
        end
        offset = offset + 100
    end
end

local oldest_id, oldest_created = first_alive(false)
local newest_id, newest_created = first_alive(true)
local expired = tonumber(redis.call('HGET', K_QUEUE, 'expired') or '0')
return {total, claimed, delayed, next_due(), oldest_id, oldest_created, newest_id, newest_created, expired}
