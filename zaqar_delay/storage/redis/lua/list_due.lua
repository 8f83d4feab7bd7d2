-- list_due.lua: one page of unclaimed messages in due-time order, after a (due, id) marker.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms, marker_due ("" for the head), marker_id, limit, client_id, echo (1/0),
--       include_delayed (1/0).
-- Returns: {cursor, id, body, record, claim, claim expiry, ...} (lib.lua's emit), cursor being
--   the ready-set member of the last message returned ("" for none), the marker_id of the
--   next page. Ready-set order is due time, then posting order. Messages whose claim ran out
--   are first returned to the ready set, so they show at their redelivery time.

local now, marker_due, marker_id = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local limit, client, echo = tonumber(ARGV[4]), encode_client(ARGV[5])[1], ARGV[6] == '1'
local include_delayed = ARGV[7] == '1'

return_lapsed_claims(now)
local low, high = '-inf', now
if include_delayed then
    high = '+inf'
end
if marker_due ~= '' then
    low = marker_due
end
local out, found, offset = {''}, 0, 0
while found < limit do
    local entries = redis.call('ZRANGEBYSCORE', K_READY, low, high, 'WITHSCORES', 'LIMIT', offset, 100)
    if #entries == 0 then
        break
    end
    offset = offset + #entries / 2
    for i = 1, #entries, 2 do
        local member, due = entries[i], entries[i + 1]
        -- Entries at the marker's own due time up to the marker's member were on earlier pages.
        local seen = marker_due ~= '' and due == marker_due and member <= marker_id
        if not seen then
            local info = load_seq(seq_of_member(member))
            if listable(info, now, client, echo) then
                emit(out, info)
                out[1] = member
                found = found + 1
                if found == limit then
                    break
                end
            end
        end
    end
end
return out
