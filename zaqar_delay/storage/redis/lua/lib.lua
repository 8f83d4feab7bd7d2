-- lib.lua: helpers shared by every queue script; scripts.py prepends it to each script, after
-- the constants generated from layout.py (the facts Python shares: the queue's KEYS as
-- K_QUEUE, K_BODIES, ... in QueueKeys order, the record layout RECORD_HEAD and its KIND_* bits,
-- BUCKET_SIZE, MAX_CLAIM_COUNT, PARKED, the REFUSED_* replies and the P_*/O_* metadata and
-- option names).
--
-- bodies and records are key prefixes: bucket n of a queue is the pair of hashes
-- "<bodies>:<n>" and "<records>:<n>" (same hash tag, so the same cluster slot).
-- Times are epoch milliseconds handed in through ARGV; scripts never read the server clock,
-- so a test clock drives them exactly like the real one.

-- Positions in a claim record (msgpack); message sequence numbers follow from C_FIRST_SEQ on.
local C_TTL, C_GRACE, C_UPDATED, C_EXPIRES, C_FIRST_SEQ = 1, 2, 3, 4, 5

-- Positions in a subscription record (msgpack).
local S_SUBSCRIBER, S_TTL, S_STARTED, S_EXPIRES, S_CONFIRMED = 1, 2, 3, 4, 5
local S_OPTIONS, S_SECRET = 6, 7
-- Optional (records written before it have 7 values): {sent ms, outcome, detail}.
local S_LAST = 8

-- How much garbage one call may collect, so no call blocks Redis for long.
local GC_BUDGET = 100
local GC_BUCKETS = 1
local LAPSED_BUDGET = 1000
-- Lua's unpack() has a small stack; bulk commands are sent in chunks of this many arguments.
local CHUNK = 2000

-- Messages are stored by their sequence number (their posting order), BUCKET_SIZE to a
-- bucket. A message record (the value of its sequence number in its bucket's records hash) is
-- RECORD_HEAD (created ms, expires ms, due ms, ttl s, claim count, kind) followed by the
-- message's id part and its client id. Kind bits:
--   KIND_CLIENT_PACKED: the client id, 32 lowercase hex digits, is stored as its 16 bytes;
--   KIND_CLIENT_DASHED: the client id, a lowercase UUID with its dashes, is stored as its 16
--                       bytes (else, with neither bit, as given, to the end of the record);
--   KIND_ID_KEPT:       the message came from another queue with its id (dead-letter moves):
--                       a length byte and the id follow the head (else the id is the 16 hex
--                       digits of the sequence number and the hex of the ID_RANDOM_BYTES that
--                       follow).
--   KIND_HOPS:          the message came through pushes of this service: a byte after the id
--                       part holds how many (at most MAX_HOPS; none without the bit).
-- Small enough to stay under hash-max-listpack-value (64 by default) for the usual client.
local DASHED_UUID = '^%x%x%x%x%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x$'

local function to_hex(raw)
    return (string.gsub(raw, '.', function(c) return string.format('%02x', string.byte(c)) end))
end

local function from_hex(hex)
    return (string.gsub(hex, '..', function(cc) return string.char(tonumber(cc, 16)) end))
end

-- A client id as records store it: {bytes, kind bit}.
local function encode_client(client)
    if #client == 32 and not string.find(client, '[^0-9a-f]') then
        return {from_hex(client), KIND_CLIENT_PACKED}
    end
    if #client == 36 and string.find(client, DASHED_UUID) and not string.find(client, '[A-F]') then
        return {from_hex((string.gsub(client, '-', ''))), KIND_CLIENT_DASHED}
    end
    return {client, 0}
end

local function decimal(n)
    return string.format('%d', n)
end

-- The member of a message in the ready and claimed sets: the number of digits of its sequence
-- number (one hex digit) and the digits, so members of one score sort in posting order.
local function member_of(seq)
    local digits = decimal(seq)
    return string.format('%x', #digits) .. digits
end

local function seq_of_member(member)
    return tonumber(string.sub(member, 2))
end

local function bucket_of(seq)
    return math.floor(seq / BUCKET_SIZE)
end

local function records_key(bucket)
    return K_RECORDS .. ':' .. decimal(bucket)
end

local function bodies_key(bucket)
    return K_BODIES .. ':' .. decimal(bucket)
end

-- A message as a table: seq, created, expires, due, ttl, count (claims so far), kind, ref
-- (the id's 8 random bytes, or the kept id), client (as stored), and once asked for, id,
-- claim and claim_expires (claim_of).
local function decode_record(seq, raw)
    local created, expires, due, ttl, count, kind, at = struct.unpack(RECORD_HEAD, raw)
    local info = {seq = seq, created = created, expires = expires, due = due, ttl = ttl,
        count = count, kind = kind}
    if bit.band(kind, KIND_ID_KEPT) ~= 0 then
        local length = string.byte(raw, at)
        info.ref = string.sub(raw, at + 1, at + length)
        info.id = info.ref
        at = at + 1 + length
    else
        info.ref = string.sub(raw, at, at + ID_RANDOM_BYTES - 1)
        at = at + ID_RANDOM_BYTES
    end
    info.hops = 0
    if bit.band(kind, KIND_HOPS) ~= 0 then
        info.hops = string.byte(raw, at)
        at = at + 1
    end
    info.client = string.sub(raw, at)
    return info
end

-- The record of `info`; its kind's KIND_HOPS bit follows info.hops (0 or nil: none).
local function encode_record(info)
    local ref, hops, kind = info.ref, '', bit.band(info.kind, bit.bnot(KIND_HOPS))
    if bit.band(kind, KIND_ID_KEPT) ~= 0 then
        ref = string.char(#ref) .. ref
    end
    if info.hops and info.hops > 0 then
        hops, kind = string.char(math.min(info.hops, MAX_HOPS)), kind + KIND_HOPS
    end
    return struct.pack(RECORD_HEAD, info.created, info.expires, info.due, info.ttl,
        math.min(info.count, MAX_CLAIM_COUNT), kind) .. ref .. hops .. info.client
end

local function message_id(info)
    if not info.id then
        info.id = string.format('%016x', info.seq) .. to_hex(info.ref)
    end
    return info.id
end

-- The queue's trash keys (keys.py): named after K_QUEUE, in its hash tag, rather than passed
-- in KEYS by every call.
local QUEUE_BASE = string.sub(K_QUEUE, 1, -#QUEUE_SUFFIX - 1)
local K_TRASH = QUEUE_BASE .. TRASH_SUFFIX
local K_TRASH_INDEXES = QUEUE_BASE .. TRASH_INDEXES_SUFFIX

-- A purge or a queue's deletion puts the queue's buckets in K_TRASH at once, and they are
-- freed a few per call (free_trash): freeing millions of messages in one call would hold every
-- other client of the store for seconds. A bucket in the trash is dead: no message is loaded
-- from it, and no new message lands in it (first_seq). Looked up once per bucket and call.
local trashed = {}
local function in_trash(bucket)
    local known = trashed[bucket]
    if known == nil then
        known = redis.call('ZSCORE', K_TRASH, bucket) ~= false
        trashed[bucket] = known
    end
    return known
end

local function load_seq(seq)
    local bucket = bucket_of(seq)
    if in_trash(bucket) then
        return nil
    end
    local raw = redis.call('HGET', records_key(bucket), decimal(seq))
    return raw and decode_record(seq, raw) or nil
end

-- The message with this id, or nil.
local function load_info(id)
    if #id == 32 then
        local seq = tonumber(string.sub(id, 1, 16), 16)
        if seq and seq < 2 ^ 53 then
            local info = load_seq(seq)
            if info and message_id(info) == id then
                return info
            end
        end
    end
    local seq = redis.call('HGET', K_ALIASES, id)
    return seq and load_seq(tonumber(seq)) or nil
end

local function store_info(info)
    redis.call('HSET', records_key(bucket_of(info.seq)), decimal(info.seq), encode_record(info))
end

local function body_of(info)
    return redis.call('HGET', bodies_key(bucket_of(info.seq)), decimal(info.seq))
end

-- Whether any message is claimed (holders exist), asked once per call.
local holders_exist = nil

-- The claim holding a message ("" for none) and that claim's expiry (0 for none). Holders
-- (sequence number -> "<claim id>|<claim expiry>") exist only for claimed messages, so
-- records keep one size for their whole life.
local function claim_of(info)
    if info.claim == nil then
        info.claim, info.claim_expires = '', 0
        if holders_exist == nil then
            holders_exist = redis.call('EXISTS', K_HOLDERS) == 1
        end
        local raw = holders_exist and redis.call('HGET', K_HOLDERS, decimal(info.seq))
        if raw then
            local split = string.find(raw, '|', 1, true)
            info.claim = string.sub(raw, 1, split - 1)
            info.claim_expires = tonumber(string.sub(raw, split + 1))
        end
    end
    return info.claim, info.claim_expires
end

local function is_live_claim(info, now)
    local cid, expires = claim_of(info)
    return cid ~= '' and expires > now
end

-- Claim id `cid` holds the message until `expires`.
local function hold(info, cid, expires)
    info.claim, info.claim_expires = cid, expires
    holders_exist = true
    redis.call('HSET', K_HOLDERS, decimal(info.seq), cid .. '|' .. decimal(expires))
    redis.call('ZADD', K_CLAIMED, expires, member_of(info.seq))
end

-- Send cmd key a1 a2 ... in chunks (args is a flat list).
local function bulk(cmd, key, args)
    for i = 1, #args, CHUNK do
        redis.call(cmd, key, unpack(args, i, math.min(i + CHUNK - 1, #args)))
    end
end

-- Tell waiting claims that a message may have become claimable, or that the earliest due
-- time moved. Costs one EXISTS when no server is waiting on this queue.
local function wake_waiters()
    if redis.call('EXISTS', K_WAITERS) == 1 then
        redis.call('PUBLISH', K_WAKE, '')
    end
end

-- Wake waiting claims for messages about to join the ready set, due at `earliest_due` at the
-- soonest (call it before adding them). Waiters sleep until the queue's next due time after
-- now (next_claimable.lua), so only a message claimable now, or due before that time, needs
-- them awake: a queue of delayed messages posted in no particular order publishes for few of
-- them, where every one woke a claim attempt in every server process.
local function wake_waiters_before_adding(earliest_due, now)
    if redis.call('EXISTS', K_WAITERS) == 0 then
        return
    end
    if earliest_due > now then
        local after = redis.call('ZRANGEBYSCORE', K_READY, '(' .. now, '+inf', 'WITHSCORES',
            'LIMIT', 0, 1)
        if #after > 0 and tonumber(after[2]) <= earliest_due then
            return  -- the waiters wake for that one first, and look again then
        end
    end
    redis.call('PUBLISH', K_WAKE, '')
end

-- Delete messages (tables from load_info, load_seq or decode_record); returns how many
-- existed. A bucket left empty leaves the bucket and expiry indexes.
local function remove_messages(infos)
    if #infos == 0 then
        return 0
    end
    local by_bucket, members, seqs, kept = {}, {}, {}, {}
    for _, info in ipairs(infos) do
        local bucket = bucket_of(info.seq)
        local fields = by_bucket[bucket] or {}
        by_bucket[bucket] = fields
        fields[#fields + 1] = decimal(info.seq)
        members[#members + 1] = member_of(info.seq)
        seqs[#seqs + 1] = decimal(info.seq)
        if bit.band(info.kind, KIND_ID_KEPT) ~= 0 then
            kept[#kept + 1] = info.ref
        end
    end
    local removed = 0
    for bucket, fields in pairs(by_bucket) do
        local key = records_key(bucket)
        for i = 1, #fields, CHUNK do
            removed = removed + redis.call('HDEL', key, unpack(fields, i, math.min(i + CHUNK - 1, #fields)))
        end
        bulk('HDEL', bodies_key(bucket), fields)
        if redis.call('EXISTS', key) == 0 then
            redis.call('ZREM', K_BUCKETS, bucket)
            redis.call('ZREM', K_EXPIRY, bucket)
        end
    end
    bulk('ZREM', K_READY, members)
    if holders_exist ~= false and redis.call('EXISTS', K_HOLDERS) == 1 then
        bulk('ZREM', K_CLAIMED, members)
        bulk('HDEL', K_HOLDERS, seqs)
    end
    if #kept > 0 then
        bulk('HDEL', K_ALIASES, kept)
    end
    if removed > 0 then
        redis.call('HINCRBY', K_QUEUE, 'n', -removed)
    end
    return removed
end

-- Delete messages that expired, counting them in the queue's "expired" tally (for metrics).
local function remove_expired(infos)
    local removed = remove_messages(infos)
    if removed > 0 then
        redis.call('HINCRBY', K_QUEUE, 'expired', removed)
    end
end

-- Delete the expired messages of one bucket and re-score the bucket in the expiry index with
-- the earliest expiry of what stays. A bucket's score is at or before the earliest expiry of
-- its messages (a claim may extend a message's life; the bucket is then looked at early).
local function collect_bucket(bucket, now)
    local flat = redis.call('HGETALL', records_key(bucket))
    local expired, earliest = {}, nil
    for i = 1, #flat, 2 do
        local info = decode_record(tonumber(flat[i]), flat[i + 1])
        if info.expires <= now then
            expired[#expired + 1] = info
        elseif earliest == nil or info.expires < earliest then
            earliest = info.expires
        end
    end
    remove_expired(expired)
    if earliest then
        redis.call('ZADD', K_EXPIRY, earliest, bucket)
    else
        redis.call('ZREM', K_EXPIRY, bucket)
        redis.call('ZREM', K_BUCKETS, bucket)
    end
end

-- Collect up to `buckets` buckets holding expired messages.
local function collect_expired(now, buckets)
    local due = redis.call('ZRANGEBYSCORE', K_EXPIRY, '-inf', now, 'LIMIT', 0, buckets)
    for _, bucket in ipairs(due) do
        collect_bucket(tonumber(bucket), now)
    end
    return #due
end

-- Delete `key` hash fields whose score in `expiry_key` is due (at most GC_BUDGET).
local function forget_lapsed(key, expiry_key, now)
    local names = redis.call('ZRANGEBYSCORE', expiry_key, '-inf', now, 'LIMIT', 0, GC_BUDGET)
    if #names > 0 then
        bulk('HDEL', key, names)
        bulk('ZREM', expiry_key, names)
    end
end

-- What is left in the trash: its buckets and detached indexes (not the counter).
local function trash_size()
    return redis.call('ZCARD', K_TRASH) + math.max(redis.call('HLEN', K_TRASH_INDEXES) - 1, 0)
end

-- Take apart one detached index: up to `budget` of its entries; returns how many it took.
local function free_index(name, state, budget)
    if string.sub(state, 1, 1) == 'z' then
        local taken = redis.call('ZREMRANGEBYRANK', name, 0, budget - 1)
        if taken < budget then  -- it held no more: Redis dropped the emptied key
            redis.call('HDEL', K_TRASH_INDEXES, name)
        end
        return taken
    end
    local reply = redis.call('HSCAN', name, string.sub(state, 2), 'COUNT', budget)
    local fields = {}
    for i = 1, #reply[2], 2 do
        fields[#fields + 1] = reply[2][i]
    end
    bulk('HDEL', name, fields)
    if reply[1] == '0' then
        redis.call('DEL', name)  -- a full scan returned every field: nothing is left
        redis.call('HDEL', K_TRASH_INDEXES, name)
    else
        redis.call('HSET', K_TRASH_INDEXES, name, 'h' .. reply[1])
    end
    return math.max(#fields, 1)
end

-- Free a slice of the trash: up to `entries` entries of detached indexes and `buckets`
-- buckets (the oldest first). Returns how much is left: buckets plus detached indexes.
local function free_trash(entries, buckets)
    local detached = redis.call('HGETALL', K_TRASH_INDEXES)
    for i = 1, #detached, 2 do
        if detached[i] ~= '#' and entries > 0 then
            entries = entries - free_index(detached[i], detached[i + 1], entries)
        end
    end
    if redis.call('HLEN', K_TRASH_INDEXES) == 1 then
        redis.call('DEL', K_TRASH_INDEXES)  -- only the counter is left
    end
    local doomed = redis.call('ZRANGE', K_TRASH, 0, buckets - 1)
    if #doomed > 0 then
        local keys = {}
        for _, bucket in ipairs(doomed) do
            keys[#keys + 1] = records_key(tonumber(bucket))
            keys[#keys + 1] = bodies_key(tonumber(bucket))
        end
        redis.call('DEL', unpack(keys))
        redis.call('ZREM', K_TRASH, unpack(doomed))
    end
    return trash_size()
end

-- Drop an index of the queue: at once when small; else unlinked (`unlink`: the store frees it
-- in the background without stalling, removal.py) or renamed into the trash (O(1)).
-- `kind`: 'z' (a ZSET) or 'h' (a HASH).
local function drop_index(key, kind, unlink)
    local size = redis.call(kind == 'z' and 'ZCARD' or 'HLEN', key)
    if size <= SWEEP_ENTRIES or unlink then
        if size > 0 then
            redis.call(unlink and 'UNLINK' or 'DEL', key)
        end
        return
    end
    local name = key .. ':t' .. redis.call('HINCRBY', K_TRASH_INDEXES, '#', 1)
    redis.call('RENAME', key, name)
    redis.call('HSET', K_TRASH_INDEXES, name, kind .. '0')
end

-- Put every bucket of the queue in the trash (O(1) when the trash is empty): its messages
-- are gone from here on.
local function trash_buckets()
    if redis.call('EXISTS', K_TRASH) == 0 then
        if redis.call('EXISTS', K_BUCKETS) == 1 then
            redis.call('RENAME', K_BUCKETS, K_TRASH)
        end
    else
        redis.call('ZUNIONSTORE', K_TRASH, 2, K_TRASH, K_BUCKETS, 'AGGREGATE', 'MAX')
        redis.call('DEL', K_BUCKETS)
    end
end

-- The last sequence number of a queue created now: past every bucket in the trash (of the
-- same queue purged, or deleted and created again), so no message lands in a dead bucket.
local function first_seq()
    local last = redis.call('ZRANGE', K_TRASH, -1, -1)
    return last[1] and (tonumber(last[1]) + 1) * BUCKET_SIZE or 0
end

-- Delete expired messages (a bucket's worth), claim records and remembered dedup ids whose
-- time is over (at most GC_BUDGET of each).
local function collect_garbage(now)
    collect_expired(now, GC_BUCKETS)
    forget_lapsed(K_CLAIMS, K_CLAIM_EXPIRY, now)
    forget_lapsed(K_DEDUP, K_DEDUP_EXPIRY, now)
end

-- The queue's metadata as a table (empty when missing or unreadable), read once per call.
local metadata_cache = nil
local function queue_metadata()
    if metadata_cache == nil then
        metadata_cache = {}
        local raw = redis.call('HGET', K_QUEUE, 'm')
        if raw then
            local ok, decoded = pcall(cjson.decode, raw)
            if ok and type(decoded) == 'table' then
                metadata_cache = decoded
            end
        end
    end
    return metadata_cache
end

-- When a message whose claim ended (released at `base`, or ran out at `base`) is claimable
-- again: its original due time, keeping its place in line, unless the queue has a
-- _retry_backoff policy: then base + min(max, initial * factor ^ (claim_count - 1)) seconds.
local function redelivery_due(info, base)
    local policy = queue_metadata()[P_RETRY_BACKOFF]
    if type(policy) ~= 'table' or type(policy['initial']) ~= 'number'
        or type(policy['factor']) ~= 'number' or type(policy['max']) ~= 'number' then
        return info.due
    end
    local exponent = math.max(info.count - 1, 0)
    local seconds = math.min(policy['max'], policy['initial'] * policy['factor'] ^ exponent)
    return base + math.floor(seconds * 1000)
end

-- Make a message that left its claim (or none) unclaimed, due at `due`.
local function unclaim(info, due)
    local member = member_of(info.seq)
    info.due = due
    if info.claim ~= '' then
        info.claim, info.claim_expires = '', 0
        redis.call('HDEL', K_HOLDERS, decimal(info.seq))
        redis.call('ZREM', K_CLAIMED, member)
    end
    store_info(info)
    redis.call('ZADD', K_READY, due, member)
end

-- Return messages whose claim ran out to the ready set (see redelivery_due).
local function return_lapsed_claims(now)
    local entries = redis.call('ZRANGEBYSCORE', K_CLAIMED, '-inf', now, 'WITHSCORES', 'LIMIT', 0, LAPSED_BUDGET)
    for i = 1, #entries, 2 do
        local seq = seq_of_member(entries[i])
        local info = load_seq(seq)
        if info then
            claim_of(info)
            unclaim(info, redelivery_due(info, tonumber(entries[i + 1])))
        else
            redis.call('ZREM', K_CLAIMED, entries[i])
            redis.call('HDEL', K_HOLDERS, decimal(seq))
        end
    end
end

-- Visit up to `limit` claimable messages (due, unexpired, no live claim), oldest due first.
-- Each visited message has already left the ready set; visit(info) decides what becomes of it.
-- Expired or vanished entries met on the way are deleted and do not count.
local function take_claimable(now, limit, visit)
    collect_garbage(now)
    return_lapsed_claims(now)
    local taken = 0
    while taken < limit do
        local members = redis.call('ZRANGEBYSCORE', K_READY, '-inf', now, 'LIMIT', 0, limit - taken)
        if #members == 0 then
            break
        end
        bulk('ZREM', K_READY, members)
        for _, member in ipairs(members) do
            local info = load_seq(seq_of_member(member))
            if info and info.expires > now then
                info.claim, info.claim_expires = '', 0
                visit(info)
                taken = taken + 1
            elseif info then
                remove_expired({info})
            end
        end
    end
end

-- A claimed message that would expire before its claim lives until claim expiry + grace.
-- (The bucket's expiry score stays earlier: collect_bucket re-scores it when it comes due.)
local function extend_lifetime(info, claim_expires, ttl, grace)
    if info.expires < claim_expires then
        info.expires = claim_expires + grace * 1000
        info.ttl = ttl + grace
    end
end

-- The live claim record as a table, or nil when unknown or expired.
local function load_live_claim(cid, now)
    local raw = redis.call('HGET', K_CLAIMS, cid)
    if not raw then
        return nil
    end
    local claim = cmsgpack.unpack(raw)
    if claim[C_EXPIRES] <= now then
        return nil
    end
    return claim
end

-- May the caller, naming claim `cid` ("" for none), change this message? "" when it may;
-- else "claimed" (a live claim other than the named one holds it), "not_claimed" (a claim was
-- named but none holds the message) or "bad_claim" (the named claim is not live and another
-- live claim holds the message).
local function claim_check(info, cid, now)
    local live = is_live_claim(info, now)
    if cid == '' then
        if live then
            return REFUSED_CLAIMED
        end
        return ''
    end
    if not live then
        return REFUSED_NOT_CLAIMED
    end
    if info.claim ~= cid then
        if load_live_claim(cid, now) then
            return REFUSED_CLAIMED
        end
        return REFUSED_BAD_CLAIM
    end
    return ''
end

-- The messages the claim still holds.
local function held_messages(cid, claim, now)
    local infos = {}
    for i = C_FIRST_SEQ, #claim do
        local info = load_seq(claim[i])
        if info and is_live_claim(info, now) and info.claim == cid then
            infos[#infos + 1] = info
        end
    end
    return infos
end

-- Whether a listing shows this message to the client whose stored form is `client`: it exists,
-- has not expired, and was posted by another client unless `echo`.
local function listable(info, now, client, echo)
    return info and info.expires > now and (echo or info.client ~= client)
end

-- Append the id, body, record, claim id ("" for none) and claim expiry of a message to `out`.
local function emit(out, info)
    local cid, claim_expires = claim_of(info)
    out[#out + 1] = message_id(info)
    out[#out + 1] = body_of(info)
    out[#out + 1] = encode_record(info)
    out[#out + 1] = cid
    out[#out + 1] = claim_expires
end

-- The ids of the queue's live subscriptions (a queue has few).
local function live_subscription_ids(now)
    local flat = redis.call('HGETALL', K_SUBSCRIPTIONS)
    local ids = {}
    for i = 1, #flat, 2 do
        if cmsgpack.unpack(flat[i + 1])[S_EXPIRES] > now then
            ids[#ids + 1] = flat[i]
        end
    end
    return ids
end

-- The earliest owed push that is not parked (0 for none). A push parked by its subscription's
-- concurrency limit stays in K_DELIVERIES (it is still owed: _delete_after_push sees it) at
-- PARKED + its owed time, which is never due.
local function earliest_push()
    local first = redis.call('ZRANGE', K_DELIVERIES, 0, 0, 'WITHSCORES')
    local score = first[2] and tonumber(first[2]) or 0
    return score < PARKED and score or 0
end

-- Owe a push again at `at` (not under a live lease): the lease that held it, if any, is
-- over, and an outcome it records later is ignored. Its rate reservation goes too.
local function owe_push_again(delivery, at)
    redis.call('ZADD', K_DELIVERIES, at, delivery)
    local raw_state = redis.call('HGET', K_DELIVERY_INFO, delivery)
    if raw_state then
        local attempts = cmsgpack.unpack(raw_state)[1]
        redis.call('HSET', K_DELIVERY_INFO, delivery, cmsgpack.pack({attempts, ''}))
    end
end

-- A message given an earlier due time: its pushes owed after `due` and no later than
-- `old_due` (owed with the message) that no live lease holds are owed at `due` instead (a
-- leased push is owed at its lease's end, and held until then). A push parked or owed later
-- (a retry) keeps its time. Returns `due` when a push came forward, else 0.
local function bring_pushes_forward(mid, due, old_due, now)
    local moved = 0
    for _, sid in ipairs(redis.call('HKEYS', K_SUBSCRIPTIONS)) do
        local delivery = sid .. ':' .. mid
        local owed = tonumber(redis.call('ZSCORE', K_DELIVERIES, delivery))
        if owed and owed > due and owed <= old_due then
            local raw_state = redis.call('HGET', K_DELIVERY_INFO, delivery)
            if owed <= now or not raw_state or cmsgpack.unpack(raw_state)[2] == '' then
                owe_push_again(delivery, due)
                moved = due
            end
        end
    end
    return moved
end

-- The range of K_PARKED entries of one subscription ('|' < '}').
local function parked_range(sid)
    return '[' .. sid .. '|', '(' .. sid .. '}'
end

-- Put back up to n parked pushes of subscription sid, oldest first, owed as before; returns
-- the earliest owed time put back (0 for none).
local function unpark(sid, n)
    local low, high = parked_range(sid)
    local entries = redis.call('ZRANGEBYLEX', K_PARKED, low, high, 'LIMIT', 0, n)
    local earliest = 0
    for _, entry in ipairs(entries) do
        local owed = tonumber(string.sub(entry, #sid + 2, #sid + 17), 16)
        local delivery = sid .. ':' .. string.sub(entry, #sid + 19)
        redis.call('ZREM', K_PARKED, entry)
        if redis.call('ZADD', K_DELIVERIES, 'XX', 'CH', owed, delivery) == 1 then
            earliest = (earliest == 0 or owed < earliest) and owed or earliest
        end
    end
    return earliest
end

-- Forget subscription sid's dispatch limits and drop its parked pushes (it is gone).
local function drop_parked(sid)
    local low, high = parked_range(sid)
    local entries = redis.call('ZRANGEBYLEX', K_PARKED, low, high)
    for _, entry in ipairs(entries) do
        local delivery = sid .. ':' .. string.sub(entry, #sid + 19)
        redis.call('ZREM', K_DELIVERIES, delivery)
        redis.call('HDEL', K_DELIVERY_INFO, delivery)
    end
    redis.call('ZREMRANGEBYLEX', K_PARKED, low, high)
    redis.call('HDEL', K_PUSH_LIMITS, sid)
end
