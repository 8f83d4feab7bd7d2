-- edit.lua: replace a message's body, and optionally its due time and ttl (the auditor's edit).
--
-- KEYS: the queue keys (lib.lua).
-- ARGV: now_ms, message_id, claim_id ("" when the caller named none), body_json ("" to keep
--   the body: a JSON text is never empty), due_ms ("" to keep it), ttl_s ("" to keep it).
-- Returns {outcome, push due}: outcome "ok", EDIT_MISSING (no such unexpired message),
-- EDIT_TTL_LAPSED (the new ttl, counted from the message's creation, has already run out:
-- nothing is written) or a claim_check refusal (lib.lua); push due the new due time when an
-- earlier one brought pushes of the message forward (bring_pushes_forward), else 0.
-- The message keeps its id, claim count and place in posting order. A new due time makes it
-- leave its claim (a reschedule is an edit of the due time alone: a consumer's "retry later");
-- a body or ttl alone leaves the claim in place.

local now, id, cid = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local body, due, ttl = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local info = load_info(id)
if not info or info.expires <= now then
    return {EDIT_MISSING, 0}
end
local refusal = claim_check(info, cid, now)
if refusal ~= '' then
    return {refusal, 0}
end
if ttl then
    local expires = info.created + ttl * 1000
    if expires <= now then
        return {EDIT_TTL_LAPSED, 0}
    end
    info.ttl, info.expires = ttl, expires
    redis.call('ZADD', K_EXPIRY, 'LT', expires, bucket_of(info.seq))
end
if body ~= '' then
    redis.call('HSET', bodies_key(bucket_of(info.seq)), decimal(info.seq), body)
end
local push_due = 0
if due then
    local old_due = info.due
    unclaim(info, due)
    wake_waiters()
    if due < old_due then
        push_due = bring_pushes_forward(id, due, old_due, now)
    end
else
    store_info(info)
end
return {'ok', push_due}
