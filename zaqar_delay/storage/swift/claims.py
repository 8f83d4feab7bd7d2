"""Claims on Swift: holding what a claim took (``taking.py``), renewing, releasing, returning
lapsed claims, dead-lettering, pops, and the listing by due time."""

from __future__ import annotations

import dataclasses
import heapq
import json
import secrets
import time
from collections.abc import Callable
from typing import Any

from zaqar_delay import errors
from zaqar_delay.models import (
    Claim,
    ClaimOutcome,
    ClaimTimes,
    ListPage,
    ListQuery,
    Message,
    OverLimit,
)
from zaqar_delay.policy import QueuePolicy
from zaqar_delay.storage import markers
from zaqar_delay.storage.bounds import CONTENDED_SPREAD
from zaqar_delay.storage.claim_records import claim_of
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.common import Doc, message_of, redelivery_due
from zaqar_delay.storage.swift.due_order import (
    FIRST_PAGE,
    due_order_key,
    named_marker,
)
from zaqar_delay.storage.swift.slots import Slot
from zaqar_delay.storage.swift.taking import Taken, TakeOps
from zaqar_delay.storage.swift.timing import elapsed_ms


class ClaimOps(TakeOps):
    """Claims: one create-only slot per message taken, so no message is in two claims."""

    def _return_lapsed_claims(
        self, project: str, queue: str, policy_of: Callable[[], QueuePolicy], now_ms: int
    ) -> bool:
        """Messages whose claim ran out become claimable again, at their own due time or after
        the queue's retry backoff; True when any did. ``policy_of()`` gives the queue's
        policy, asked for only when a claim lapsed."""
        prefix = self._index_prefix(project, queue, "c")
        lapsed = self._swift.listing(
            self._container(names.INDEX),
            prefix,
            end_marker=prefix + names.time_part(now_ms + 1),
            limit=self._list_scan_budget,
        )
        if not lapsed:
            return False
        policy = policy_of()

        def give_back(entry: dict[str, Any]) -> None:
            fields = names.fields_of(entry["content_type"])
            message_id = entry["name"].rsplit("/", 1)[1]
            ended_ms = int(entry["name"].rsplit("/", 2)[1])
            # Read as missing, a slot a renewal is overwriting would hand its message out
            # while the renewed claim holds it: a 404 is read again (``known``).
            slot = self._read_slot(project, queue, message_id, int(fields["n"]), known=True)
            if slot is not None and slot.live(now_ms):
                # Renewed, and the renewal's entry not yet written (or this one not yet
                # deleted): index it at the claim's new end rather than hand it out.
                doc = {"d": int(fields["d"]), "e": int(fields["e"]), "u": fields["u"]}
                self._write_claimed_entry(project, queue, message_id, doc, slot)
                self._delete_index_entry(entry["name"])
                return
            due = redelivery_due(policy, int(fields["d"]), int(fields["cc"]), ended_ms)
            doc = {"d": due, "e": int(fields["e"]), "u": fields["u"]}
            if due != int(fields["d"]):
                stored = self._read_message(project, queue, message_id, known=True)
                if stored is not None:
                    self._write_message(project, queue, message_id, {**stored, "d": due})
            latest = Slot(int(fields["n"]), int(fields["cc"]))
            self._write_due_entry(project, queue, message_id, doc, latest)
            self._delete_index_entry(entry["name"])

        self._swift.each(give_back, lapsed)
        return True

    def _hold(self, project: str, queue: str, taken: Taken, grace_s: int, ttl_s: int) -> Doc:
        """Index a taken message as claimed, and let it live until the claim's end plus
        ``grace_s``; returns its document as it now is. A message claimable by its name is
        so no longer once its claimed entry is written (the order: it is never without
        either)."""
        doc, message_id = taken.doc, taken.message_id
        extended = int(doc["e"]) < taken.slot.expires_ms
        if extended:
            doc = {**doc, "e": taken.slot.expires_ms + grace_s * 1000, "t": ttl_s + grace_s}
        if doc.get("i"):
            self._write_claimed_entry(project, queue, message_id, doc, taken.slot)
            doc = {**doc, "i": 0}
            if extended:
                self._write_message(project, queue, message_id, doc)
            else:
                self._unname(project, queue, message_id, doc)
            return doc
        if extended:
            self._write_message(project, queue, message_id, doc)
        self._write_claimed_entry(project, queue, message_id, doc, taken.slot)
        self._delete_index_entry(self._due_entry(project, queue, int(taken.doc["d"]), message_id))
        return doc

    def claim(
        self, project: str, queue: str, times: ClaimTimes, limit: int, now_ms: int
    ) -> ClaimOutcome:
        claim_id = secrets.token_hex(16)
        expires_ms = now_ms + times.ttl_s * 1000
        # Needed for dead letters in any case: read while lapsed claims are looked for.
        policy_read = self._swift.submit(self._policy, project, queue)
        self._return_lapsed_claims(project, queue, policy_read.result, now_ms)
        policy = policy_read.result()
        taken = self._take(project, queue, Slot(0, 0, claim_id, expires_ms), limit, now_ms)
        if not taken:
            return ClaimOutcome(None)
        dead = [t for t in taken if policy.claimed_too_often(t.slot.claim_count)]
        over_limit = None
        if dead:
            over_limit = OverLimit(
                policy.dead_letter_queue or "",
                policy.dead_letter_ttl_s,
                tuple(message_of(t.message_id, t.doc, t.slot, now_ms) for t in dead),
            )
        kept = [t for t in taken if t not in dead]
        if not kept:
            return ClaimOutcome(None, over_limit)
        docs = self._swift.each(
            lambda t: self._hold(project, queue, t, times.grace_s, times.ttl_s), kept
        )
        numbers = {t.message_id: t.slot.n for t in kept}
        record = {"t": times.ttl_s, "g": times.grace_s, "u": now_ms, "e": expires_ms, "m": numbers}
        self._write_claim(project, queue, claim_id, record)
        self._claim_slots.learn(self._claim_name(project, queue, claim_id), numbers)
        messages = tuple(
            message_of(t.message_id, doc, t.slot, now_ms) for t, doc in zip(kept, docs, strict=True)
        )
        claim = Claim(claim_id, times.ttl_s, times.grace_s, now_ms, expires_ms, messages)
        return ClaimOutcome(claim, over_limit)

    def _write_claim(self, project: str, queue: str, claim_id: str, record: Doc) -> None:
        self._swift.put(
            self._container(names.CLAIMS),
            self._claim_name(project, queue, claim_id),
            json.dumps(record).encode(),
            names.content_type(e=record["e"]),
        )

    def delete_dead_letters(self, project: str, queue: str, over: OverLimit, now_ms: int) -> None:
        """As the claim that reported them left them: taken through a slot but not indexed
        as claimed (a claim indexes so only what it returns), so each goes with its due
        entry and its slots."""
        self._swift.each(
            lambda m: self._remove_message(project, queue, m.id, {"d": m.due_ms}, None),
            over.messages,
        )

    def pop_messages(self, project: str, queue: str, limit: int, now_ms: int) -> list[Message]:
        started = time.monotonic()
        holder = Slot(0, 0, secrets.token_hex(16), now_ms + self._times.pop_held_ms)
        self._return_lapsed_claims(project, queue, lambda: self._policy(project, queue), now_ms)
        taken = self._take(project, queue, holder, limit, now_ms)
        if taken and elapsed_ms(started) >= self._times.pop_deadline_ms:
            # Its hold may end before the deletes land, and a claim take what it returns:
            # left to the hold's end instead, when they are claimable again.
            raise errors.StorageUnavailable("Swift was too slow for the pop to finish in time.")
        # No claimed entry was written for them: only their slots go with them.
        self._swift.each(
            lambda t: self._remove_message(
                project, queue, t.message_id, t.doc, None, slots=t.slot.n
            ),
            taken,
        )
        return [message_of(t.message_id, t.doc, Slot(0, t.slot.claim_count), now_ms) for t in taken]

    # -- claims by id --------------------------------------------------------------------------

    def _held(
        self, project: str, queue: str, claim_id: str, record: Doc, now_ms: int
    ) -> list[tuple[str, Doc, Slot]]:
        """The messages the claim still holds (its slot is their latest, live, and theirs),
        oldest due first."""

        def still_held(item: tuple[str, int]) -> tuple[str, Doc, Slot] | None:
            message_id, n = item
            slot = self._holding_slot(project, queue, message_id, n, claim_id, now_ms)
            if slot is None:
                return None
            doc = self._read_message(project, queue, message_id, known=True)
            return None if doc is None else (message_id, doc, slot)

        found = self._swift.each(still_held, list(dict(record["m"]).items()))
        held = [item for item in found if item is not None]
        return sorted(held, key=lambda item: (int(item[1]["d"]), item[0]))

    def get_claim(self, project: str, queue: str, claim_id: str, now_ms: int) -> Claim:
        record = self._live_claim(project, queue, claim_id, now_ms)
        if record is None:
            raise errors.ClaimDoesNotExist(claim_id, queue, project)
        held = self._held(project, queue, claim_id, record, now_ms)
        return claim_of(
            claim_id, record, (message_of(i, doc, slot, now_ms) for i, doc, slot in held)
        )

    def renew_claim(
        self, project: str, queue: str, claim_id: str, ttl_s: int, grace_s: int, now_ms: int
    ) -> None:
        record = self._live_claim(project, queue, claim_id, now_ms)
        if record is None:
            raise errors.ClaimDoesNotExist(claim_id, queue, project)
        expires_ms = now_ms + ttl_s * 1000
        held = self._held(project, queue, claim_id, record, now_ms)

        def extend(item: tuple[str, Doc, Slot]) -> None:
            message_id, doc, slot = item
            renewed = dataclasses.replace(slot, expires_ms=expires_ms)
            # The new entry first: the message is never without one while the claim lives.
            self._write_slot(project, queue, message_id, renewed)
            self._hold(project, queue, Taken(message_id, doc, renewed), grace_s, ttl_s)
            old = self._claimed_entry(project, queue, slot.expires_ms, message_id)
            if old != self._claimed_entry(project, queue, expires_ms, message_id):
                self._delete_index_entry(old)

        self._swift.each(extend, held)
        self._write_claim(
            project,
            queue,
            claim_id,
            {**record, "t": ttl_s, "g": grace_s, "u": now_ms, "e": expires_ms},
        )

    def release_claim(self, project: str, queue: str, claim_id: str, now_ms: int) -> None:
        found = self._swift.get(
            self._container(names.CLAIMS), self._claim_name(project, queue, claim_id), known=True
        )
        if found is None:
            return
        record = dict(json.loads(found[1]))
        policy = self._policy(project, queue)
        held = self._held(project, queue, claim_id, record, now_ms)

        def give_back(item: tuple[str, Doc, Slot]) -> None:
            message_id, doc, slot = item
            self._write_slot(project, queue, message_id, dataclasses.replace(slot, expires_ms=0))
            due = redelivery_due(policy, int(doc["d"]), slot.claim_count, now_ms)
            if due != int(doc["d"]):
                doc = {**doc, "d": due}
                self._write_message(project, queue, message_id, doc)
            self._write_due_entry(project, queue, message_id, doc, slot)
            self._delete_index_entry(
                self._claimed_entry(project, queue, slot.expires_ms, message_id)
            )

        self._swift.each(give_back, held)
        self._swift.delete(
            self._container(names.CLAIMS), self._claim_name(project, queue, claim_id)
        )

    def list_messages_by_due(
        self, project: str, queue: str, listing: ListQuery, now_ms: int
    ) -> ListPage:
        after = markers.due(listing.marker)
        if after is not None and not names.is_message_id(after[1]):
            raise errors.InvalidParameter('The "marker" parameter is invalid.')
        self._return_lapsed_claims(project, queue, lambda: self._policy(project, queue), now_ms)
        prefix = self._index_prefix(project, queue, "d")
        start = f"{prefix}{names.time_part(after[0])}/{after[1]}" if after else ""
        end = prefix + names.time_part(now_ms + 1) if not listing.include_delayed else ""
        # Each source may give the whole page, and the messages listing passes over claimed
        # ones too.
        page = max(FIRST_PAGE, listing.limit * CONTENDED_SPREAD)
        indexed = self._swift.walk(
            self._container(names.INDEX), prefix, marker=start, end_marker=end, page=page
        )
        message_prefix = names.queue_prefix(project, queue)
        named = self._named_later(
            project,
            queue,
            message_prefix + named_marker(*after) if after else "",
            message_prefix + names.time_part(now_ms + 1) if not listing.include_delayed else "",
            page,
        )
        kept: list[tuple[str, int]] = []
        for entry in heapq.merge(indexed, named, key=due_order_key):
            fields = names.fields_of(entry["content_type"])
            if int(fields["e"]) > now_ms and (listing.echo or fields["u"] != listing.client_id):
                kept.append((entry["name"].rsplit("/", 1)[1], int(fields.get("cc", 0))))
                if len(kept) == listing.limit:
                    break
        docs = self._swift.each(
            lambda item: self._read_message(project, queue, item[0], known=True), kept
        )
        messages = tuple(
            message_of(mid, doc, Slot(0, count), now_ms)
            for (mid, count), doc in zip(kept, docs, strict=True)
            if doc is not None
        )
        last = messages[-1] if messages else None
        next_marker = markers.make_due(last.due_ms, last.id) if last else None
        return ListPage(messages, next_marker)
