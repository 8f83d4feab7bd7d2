-- list.lua: one page of messages in posting order, after a marker, through the listing filters.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms, marker_seq ("" for the head), marker_id ("" for none: a message id to list
--       after, from the head when no such message exists), limit, client_id, echo (1/0),
--       include_claimed (1/0), include_delayed (1/0), scan_budget.
-- Returns: {cursor_seq, more, id, body, record, claim, claim expiry, ...} (lib.lua's emit).
--   cursor_seq is the sequence of the last message examined ("" if none), the marker of the
--   next page; more is 1 when the scan stopped at scan_budget entries (a page behind many
--   hidden messages comes back short, possibly empty, and the listing goes on from
--   cursor_seq) and 0 otherwise.
-- Buckets hold consecutive sequence numbers, so the listing walks the bucket index from the
-- marker's bucket on and sorts each bucket's records.

local now, marker = tonumber(ARGV[1]), tonumber(ARGV[2])
local limit, client, echo = tonumber(ARGV[4]), encode_client(ARGV[5])[1], ARGV[6] == '1'
local include_claimed, include_delayed = ARGV[7] == '1', ARGV[8] == '1'
local budget = tonumber(ARGV[9])
if ARGV[3] ~= '' then
    local named = load_info(ARGV[3])
    marker = named and named.seq
end
local after = marker or -1

local out = {'', 0}
local found, scanned = 0, 0
local bucket = bucket_of(math.max(after, 0))
while found < limit and scanned < budget do
    local next_bucket = redis.call('ZRANGEBYSCORE', K_BUCKETS, bucket, '+inf', 'LIMIT', 0, 1)
    if #next_bucket == 0 then
        break
    end
    bucket = tonumber(next_bucket[1])
    local flat = redis.call('HGETALL', records_key(bucket))
    local seqs, raws = {}, {}
    for i = 1, #flat, 2 do
        local seq = tonumber(flat[i])
        if seq > after then
            seqs[#seqs + 1] = seq
            raws[seq] = flat[i + 1]
        end
    end
    table.sort(seqs)
    for _, seq in ipairs(seqs) do
        scanned = scanned + 1
        out[1] = decimal(seq)
        after = seq
        local info = decode_record(seq, raws[seq])
        if listable(info, now, client, echo)
            and (include_claimed or not is_live_claim(info, now))
            and (include_delayed or info.due <= now) then
            emit(out, info)
            found = found + 1
        end
        if found == limit or scanned >= budget then
            break
        end
    end
    bucket = bucket + 1
end
if found < limit and scanned >= budget then
    out[2] = 1
end
return out
