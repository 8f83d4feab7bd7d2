"""Claims on MongoDB: taking messages by conditional updates, renewing, releasing, and the
in-place moves of messages dead-lettered within the store."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pymongo

from zaqar_delay import errors
from zaqar_delay.models import (
    Claim,
    ClaimOutcome,
    ClaimTimes,
    Message,
    OverLimit,
)
from zaqar_delay.policy import QueuePolicy
from zaqar_delay.storage.bounds import CLAIM_ATTEMPTS, CONTENDED_SPREAD, LIST_SCAN_BUDGET
from zaqar_delay.storage.claim_records import claim_of
from zaqar_delay.storage.contention import contended_choice
from zaqar_delay.storage.mongodb.common import (
    Doc,
    claimable_filter,
    message_of,
    redelivery,
)
from zaqar_delay.storage.mongodb.errors import translate_class_errors
from zaqar_delay.storage.mongodb.positions import Positions
from zaqar_delay.storage.mongodb.schema import as_date

LOG = logging.getLogger(__name__)


@translate_class_errors
class ClaimOps(Positions):
    """Claims: one conditional update per message taken, so no message is in two claims."""

    if TYPE_CHECKING:

        def _owe_pushes(
            self, project: str, queue: str, stored: Sequence[Doc], now_ms: int
        ) -> int: ...

    def claim_candidates(self, scope: Doc, now_ms: int, limit: int) -> pymongo.cursor.Cursor[Doc]:
        """Ids of up to ``limit`` claimable messages of ``scope``, oldest due first.

        Served by the ``claimable`` index: equality on the scope, a range on ``v``, and the sort
        in index order, so a claim reads ``limit`` index entries whatever the backlog.
        """
        return (
            self._messages.find(claimable_filter(scope, now_ms), {"_id": 1})
            .sort([("v", 1), ("k", 1)])
            .limit(limit)
            .hint("claimable")
        )

    def _take(
        self,
        project: str,
        queue: str,
        claim_id: str,
        expires_ms: int,
        limit: int,
        policy: QueuePolicy,
        now_ms: int,
    ) -> list[Doc]:
        """Put up to ``limit`` claimable messages under ``claim_id``; returns their documents
        (claim count already raised), oldest due first.

        Fewer than ``limit`` only when no more are claimable: rounds that lose candidates to
        concurrent claims spread out (``storage.contention``), and a claim still short after
        ``CLAIM_ATTEMPTS`` contended rounds takes the rest one at a time, each the oldest
        claimable left, which no concurrent claim can take from under it."""
        scope = self._queue_filter(project, queue)
        self._return_lapsed_claims(scope, policy, now_ms)
        claimable = claimable_filter(scope, now_ms)
        taking = {"$set": {"cid": claim_id, "ce": expires_ms, "v": expires_ms}, "$inc": {"cc": 1}}
        taken, spread = 0, 1
        for _ in range(CLAIM_ATTEMPTS):
            wanted = limit - taken
            listed = min(wanted * spread, LIST_SCAN_BUDGET)
            candidates = [d["_id"] for d in self.claim_candidates(scope, now_ms, listed)]
            if not candidates:
                break
            tried = contended_choice(candidates, wanted)
            # The v <= now guard drops candidates a concurrent claimer took meanwhile.
            won = self._messages.update_many({**claimable, "_id": {"$in": tried}}, taking)
            taken += won.modified_count
            if taken >= limit or (won.modified_count == len(tried) and len(candidates) < listed):
                break  # all it wanted, or all there was
            if won.modified_count < len(tried):
                spread *= CONTENDED_SPREAD
        else:
            while taken < limit and self._take_oldest(claimable, taking):
                taken += 1
        if not taken:
            return []
        held = self._messages.find({**scope, "cid": claim_id}).sort([("d", 1), ("k", 1)])
        return list(held)

    def _take_oldest(self, claimable: Doc, taking: Doc) -> bool:
        """Apply ``taking`` to the oldest message matching ``claimable``, in one atomic
        operation; whether there was one."""
        taken = self._messages.find_one_and_update(
            claimable, taking, sort=[("v", 1), ("k", 1)], hint="claimable", projection={"_id": 1}
        )
        return taken is not None

    def _extend_lifetimes(self, held: Doc, expires_ms: int, ttl_s: int, grace_s: int) -> None:
        """Messages matching ``held`` that would expire before the claim ends live until its
        end plus ``grace_s``."""
        extended = expires_ms + grace_s * 1000
        self._messages.update_many(
            {**held, "e": {"$lt": expires_ms}},
            {"$set": {"e": extended, "ex": as_date(extended), "t": ttl_s + grace_s}},
        )

    def claim(
        self, project: str, queue: str, times: ClaimTimes, limit: int, now_ms: int
    ) -> ClaimOutcome:
        claim_id = secrets.token_hex(16)
        expires_ms = now_ms + times.ttl_s * 1000
        policy = self._policy(project, queue)
        taken = self._take(project, queue, claim_id, expires_ms, limit, policy, now_ms)
        if not taken:
            return ClaimOutcome(None)
        dead = [d for d in taken if policy.claimed_too_often(d["cc"])]
        over_limit = None
        if dead:
            over_limit = OverLimit(
                policy.dead_letter_queue or "",
                policy.dead_letter_ttl_s,
                tuple(message_of(d, now_ms) for d in dead),
            )
        kept = [str(d["_id"]) for d in taken if d not in dead]
        if not kept:
            return ClaimOutcome(None, over_limit)
        scope = self._queue_filter(project, queue)
        self._extend_lifetimes(
            {**scope, "_id": {"$in": kept}}, expires_ms, times.ttl_s, times.grace_s
        )
        self._claims.insert_one(
            {
                **scope,
                "_id": claim_id,
                "t": times.ttl_s,
                "g": times.grace_s,
                "u": now_ms,
                "e": expires_ms,
                "ex": as_date(expires_ms),
            }
        )
        held = self._messages.find({**scope, "_id": {"$in": kept}, "cid": claim_id})
        ordered = held.sort([("d", 1), ("k", 1)])
        messages = tuple(message_of(d, now_ms) for d in ordered)
        claim = Claim(claim_id, times.ttl_s, times.grace_s, now_ms, expires_ms, messages)
        return ClaimOutcome(claim, over_limit)

    def move_dead_letters(self, project: str, queue: str, over: OverLimit, now_ms: int) -> None:
        """In place, in one bulk write: each message changes queue in one atomic update (no
        copy, so never two of it), only while the claim that took it still holds it. Owed to
        the dead-letter queue's subscriptions first, as a post owes them: a crash before the
        move leaves pushes whose message is not there yet, which a lease drops (the next
        claim moves the message and owes them again)."""
        self._owe_pushes(
            project, over.queue, [{"_id": m.id, "d": now_ms} for m in over.messages], now_ms
        )
        first = self._reserve_sequence(project, over.queue, len(over.messages), now_ms)
        moves = []
        for i, message in enumerate(over.messages):
            ttl = over.ttl_s or message.ttl_s
            expires = now_ms + ttl * 1000
            match = {"_id": message.id, "p": project, "q": queue, "cid": message.claim_id}
            fields = {
                "q": over.queue,
                "k": first + i,
                "t": ttl,
                "e": expires,
                "ex": as_date(expires),
                "d": now_ms,
                "v": now_ms,
                "cid": None,
                "ce": 0,
                "cc": 0,
            }
            moves.append((match, fields))
        self._update_placed(project, over.queue, moves, now_ms)
        self._wakeups.wake(project, over.queue)

    def next_claimable_ms(self, project: str, queue: str, now_ms: int) -> int | None:
        # Unclaimed messages have v = due, claimed ones v = claim expiry: one index lookup.
        scope = self._queue_filter(project, queue)
        found = self._messages.find_one(
            {**scope, "v": {"$gt": now_ms}}, {"v": 1}, sort=[("v", 1), ("k", 1)]
        )
        return None if found is None else int(found["v"])

    def get_claim(self, project: str, queue: str, claim_id: str, now_ms: int) -> Claim:
        claim = self._live_claim(project, queue, claim_id, now_ms)
        if claim is None:
            raise errors.ClaimDoesNotExist(claim_id, queue, project)
        held = self._messages.find(
            {**self._queue_filter(project, queue), "cid": claim_id, "ce": {"$gt": now_ms}}
        ).sort([("d", 1), ("k", 1)])
        return claim_of(claim_id, claim, (message_of(d, now_ms) for d in held))

    def renew_claim(
        self, project: str, queue: str, claim_id: str, ttl_s: int, grace_s: int, now_ms: int
    ) -> None:
        scope = self._queue_filter(project, queue)
        expires_ms = now_ms + ttl_s * 1000
        renewed = self._claims.update_one(
            {**scope, "_id": claim_id, "e": {"$gt": now_ms}},
            {
                "$set": {
                    "t": ttl_s,
                    "g": grace_s,
                    "u": now_ms,
                    "e": expires_ms,
                    "ex": as_date(expires_ms),
                }
            },
        )
        if renewed.matched_count == 0:
            raise errors.ClaimDoesNotExist(claim_id, queue, project)
        self._messages.update_many(
            {**scope, "cid": claim_id, "ce": {"$gt": now_ms}},
            {"$set": {"ce": expires_ms, "v": expires_ms}},
        )
        self._extend_lifetimes({**scope, "cid": claim_id}, expires_ms, ttl_s, grace_s)

    def release_claim(self, project: str, queue: str, claim_id: str, now_ms: int) -> None:
        scope = self._queue_filter(project, queue)
        if not self._claims.delete_one({**scope, "_id": claim_id}).deleted_count:
            return
        released = self._messages.update_many(
            {**scope, "cid": claim_id, "ce": {"$gt": now_ms}},
            redelivery(self._policy(project, queue), now_ms),
        )
        if released.modified_count:
            self._wakeups.wake(project, queue)

    def pop_messages(self, project: str, queue: str, limit: int, now_ms: int) -> list[Message]:
        holder = secrets.token_hex(16)
        policy = self._policy(project, queue)
        taken = self._take(project, queue, holder, now_ms + 60_000, limit, policy, now_ms)
        if taken:
            try:
                self._messages.delete_many({**self._queue_filter(project, queue), "cid": holder})
            except pymongo.errors.WriteConcernError as exc:
                # The primary removed them, and only this answer delivers them (as on Redis,
                # ``acks.made_anyway``): a failover that loses the removal delivers them again.
                LOG.warning("a pop answered although the replica set did not confirm it (%s)", exc)
        return [message_of(d, now_ms) for d in taken]
