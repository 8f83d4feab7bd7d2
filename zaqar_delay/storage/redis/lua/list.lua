-- list.lua: one page of messages in posting order, after a marker, through the listing filters.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms, marker_seq ("" for the head), limit, client_id, echo (1/0),
--       include_claimed (1/0), include_delayed (1/0), scan_budget.
-- Returns: {cursor_seq, more, id, body, info, id, body, info, ...}. cursor_seq is the sequence
--   of the last message examined ("" if none), the marker of the next page; more is 1 when the
--   scan stopped at scan_budget entries (a page behind many hidden messages comes back short,
--   possibly empty, and the listing goes on from cursor_seq) and 0 otherwise.

local now, marker, limit = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local client, echo = ARGV[4], ARGV[5] == '1'
local include_claimed, include_delayed = ARGV[6] == '1', ARGV[7] == '1'
local budget = tonumber(ARGV[8])

local start = '-inf'
if marker ~= '' then
    start = '(' .. marker
end
local out = {'', 0}
local found, scanned = 0, 0
while found < limit and scanned < budget do
    local batch = math.min(math.max(limit - found, 50), budget - scanned)
    local entries = redis.call('ZRANGEBYSCORE', K_FIFO, start, '+inf', 'WITHSCORES', 'LIMIT', 0, batch)
    if #entries == 0 then
        break
    end
    for i = 1, #entries, 2 do
        local id, seq = entries[i], entries[i + 1]
        scanned = scanned + 1
        out[1] = seq
        start = '(' .. seq
        local info = load_info(id)
        if listable(info, now, client, echo)
            and (include_claimed or not is_live_claim(info, now))
            and (include_delayed or info[I_DUE] <= now) then
            emit(out, id, info)
            found = found + 1
            if found == limit then
                break
            end
        end
    end
    if #entries < batch * 2 then
        break
    end
end
if found < limit and scanned >= budget then
    out[2] = 1
end
return out
