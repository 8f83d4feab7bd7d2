-- claim.lua: claim up to `limit` claimable messages, oldest due first, in one call.
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms, claim_id, ttl_s, grace_s, limit.
-- Returns: {claimed, dead, dead_letter_queue, dead_letter_ttl_s} where claimed is
--   {id, body, record, claim, claim expiry, ...} (lib.lua's emit) of the messages returned to the caller and dead is the same for
--   messages already claimed _max_claim_count times: this claim holds them (so nobody else
--   takes them) for the caller to move to dead_letter_queue. The policy comes from the queue
--   metadata (_max_claim_count >= 1 and _dead_letter_queue both set), read here so a claim
--   stays one round trip; dead_letter_ttl_s is 0 when messages keep their ttl.
-- Cost: O(log N + n) in the backlog N, plus amortised garbage collection.

local now, cid = tonumber(ARGV[1]), ARGV[2]
local ttl, grace, limit = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])

local max_claims, dead_letter_queue, dead_letter_ttl = 0, '', 0
local metadata = queue_metadata()
local count, target = metadata[P_MAX_CLAIM_COUNT], metadata[P_DEAD_LETTER_QUEUE]
if type(count) == 'number' and count >= 1 and type(target) == 'string' and target ~= '' then
    max_claims, dead_letter_queue = count, target
    local ttl_override = metadata[P_DEAD_LETTER_QUEUE_MESSAGES_TTL]
    if type(ttl_override) == 'number' then
        dead_letter_ttl = ttl_override
    end
end
local expires = now + ttl * 1000

local claimed, dead, seqs = {}, {}, {}
take_claimable(now, limit, function(info)
    hold(info, cid, expires)
    if max_claims > 0 and info.count >= max_claims then
        emit(dead, info)
    else
        info.count = info.count + 1
        extend_lifetime(info, expires, ttl, grace)
        store_info(info)
        emit(claimed, info)
        seqs[#seqs + 1] = info.seq
    end
end)
if #seqs > 0 then
    redis.call('HSET', K_CLAIMS, cid, cmsgpack.pack({ttl, grace, now, expires, unpack(seqs)}))
    redis.call('ZADD', K_CLAIM_EXPIRY, expires, cid)
end
return {claimed, dead, dead_letter_queue, dead_letter_ttl}
