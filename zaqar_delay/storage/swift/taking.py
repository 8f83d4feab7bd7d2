"""Taking due messages on Swift: a claim (or a pop) lists the oldest due entries of the
claim index and creates each message's next claim slot, which one claimer only can do; a
claimer that loses a slot leaves the message to its taker for the taker grace and then
repairs the index; entries of missing or expired messages are removed as they are met."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from zaqar_delay.storage.bounds import (
    CLAIM_ATTEMPTS,
    CONTENDED_CLAIM_ROUNDS,
    CONTENDED_SPREAD,
    LIST_SCAN_BUDGET,
)
from zaqar_delay.storage.contention import contended_choice
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.common import Doc, is_named_entry
from zaqar_delay.storage.swift.due_order import DueCursor, DueOrderOps
from zaqar_delay.storage.swift.slot_ops import SlotOps
from zaqar_delay.storage.swift.slots import Slot, slot_from_document


@dataclasses.dataclass(frozen=True, slots=True)
class Taken:
    """A message a claim took: its id, its document and the slot the claim created."""

    message_id: str
    doc: Doc
    slot: Slot


class TakeOps(DueOrderOps, SlotOps):
    """Taking messages through their claim slots, for claims and pops."""

    def _try_take(
        self, project: str, queue: str, entry: dict[str, Any], claim: Slot, now_ms: int
    ) -> Taken | None:
        """Take one message for ``claim`` through the index entry ``entry``: create its next
        slot, then check that the message is there, due and unexpired. Only the claimer that
        created the slot reads the message, while the slot settles: under concurrent claims,
        which meet the same entries, the others are spared that read. None when there is
        nothing to take: another claim took the slot first, or the message is not to be
        taken, and the slot is then voided so no claim holds it without having it."""
        fields = names.fields_of(entry["content_type"])
        latest = Slot(int(fields.get("n", 0)), int(fields.get("cc", 0)))
        name = entry["name"]
        # A second round when the first finds the entry stale and rewrites it as due: the
        # message is then free to take (its slot was voided, or its claim lapsed), through
        # a due entry of the index (which a named one is rewritten as).
        for _ in range(2):
            outcome = self._take_through(project, queue, name, latest, claim, now_ms)
            if not isinstance(outcome, Slot):
                return outcome
            latest = outcome
            _, due, message_id = name.rsplit("/", 2)
            name = self._due_entry(project, queue, int(due), message_id)
        return None

    def _take_through(
        self, project: str, queue: str, name: str, latest: Slot, claim: Slot, now_ms: int
    ) -> Taken | Slot | None:
        """One round of :meth:`_try_take` through index entry ``name``, which names
        ``latest`` as the message's latest slot. A Slot when the entry was stale and is now
        rewritten as due with that latest slot, to take the one after."""
        message_id = name.rsplit("/", 1)[1]
        count = latest.claim_count
        slot = Slot(latest.n + 1, count + 1, claim.claim_id, claim.expires_ms, now_ms)
        container = self._container(names.CLAIMS)
        slot_name = self._slot_name(project, queue, message_id, slot.n)
        body = slot.document()
        # Read first: a stale entry names a slot that exists, and a renewal, a release or a
        # void overwriting it hides it from a create-only write at that moment, which would
        # store over the claim. A read hidden so too leaves the creation a moment later,
        # which an overwrite of the slot that close after the last is needed to hide.
        taker = self._read_slot(project, queue, message_id, slot.n)
        if taker is not None:
            return self._after_losing(project, queue, message_id, name, taker, now_ms)
        sent = time.monotonic()
        if not self._swift.create(container, slot_name, body, slot.content_type()):
            # It exists (the create was refused), and its taker may be overwriting it.
            taker = self._read_slot(project, queue, message_id, slot.n, known=True)
            return self._after_losing(project, queue, message_id, name, taker, now_ms)
        past_post = self._past_post(name, now_ms)
        reading = self._swift.submit(
            lambda: self._read_message(project, queue, message_id, known=past_post)
        )
        kept = self._swift.settled(container, slot_name, sent)
        if kept != body:
            taker = None if kept is None else slot_from_document(slot.n, kept)
            return self._after_losing(project, queue, message_id, name, taker, now_ms)
        doc = reading.result()
        if doc is None:
            # Deleted, or its post has yet to write it: the slot goes again, so the message,
            # if it comes, is taken as if this claim had never met it.
            self._swift.delete(container, slot_name)
            self._remove_orphan(project, queue, name, now_ms)
            return None
        if int(doc["e"]) <= now_ms:
            self._remove_message(project, queue, message_id, doc, None, slots=slot.n)
            return None
        if int(doc["d"]) == int(name.rsplit("/", 2)[1]) and int(doc["d"]) <= now_ms:
            return Taken(message_id, doc, slot)
        # Not handed out: the slot is voided, its claim count left as it was.
        voided = Slot(slot.n, count)
        self._write_slot(project, queue, message_id, voided)
        if int(doc["d"]) != int(name.rsplit("/", 2)[1]):
            # Rescheduled. The edit writes the entry of its new due time after the message,
            # and may have stopped in between: that entry is written here too (the same
            # object, if the edit wrote it), so this stale one is never the message's last.
            if not doc.get("i"):
                self._write_due_entry(project, queue, message_id, doc, voided)
            self._delete_index_entry(name)
        return None

    def _after_losing(
        self,
        project: str,
        queue: str,
        message_id: str,
        name: str,
        taker: Slot | None,
        now_ms: int,
    ) -> Slot | None:
        """Another claimer created the slot index entry ``name`` promised (``taker``, as
        read). A live claim, or an edit's void slot (no claim, taken at a time), taken less
        than ``SwiftTimes.taker_grace_ms`` ago is still to index the message itself; otherwise (its
        taker may have died) the index is repaired here. Returns the message's latest slot
        when the entry now names it as due, unchanged, so it may be taken at once."""
        if (
            taker is not None
            and (taker.live(now_ms) or not taker.claim_id)
            and taker.taken_ms + self._times.taker_grace_ms > now_ms
        ):
            return None
        doc = self._read_message(project, queue, message_id, known=self._past_post(name, now_ms))
        if doc is None:
            self._remove_orphan(project, queue, name, now_ms)
            return None
        latest = self._repair_index(project, queue, message_id, doc, name, now_ms)
        unchanged = int(doc["d"]) == int(name.rsplit("/", 2)[1])
        return latest if unchanged else None

    def _repair_index(
        self, project: str, queue: str, message_id: str, doc: Doc, stale: str, now_ms: int
    ) -> Slot | None:
        """The slot an index entry promised was taken: index the message by its latest slot
        instead. A claimer that took the slot and died before indexing the message leaves
        only this entry, so it is rewritten, never just deleted: as claimed until that
        claim ends, or as due with the right slot number. Returns that latest slot when the
        message is due again (no live claim holds it)."""
        latest = self._current_slot(project, queue, message_id)
        if latest.live(now_ms):
            self._write_claimed_entry(project, queue, message_id, doc, latest)
            self._leave_entry(project, queue, message_id, doc, stale)
            return None
        # The same name, rewritten with the number a claimer must take next; a message
        # claimable by its name gets a due entry instead, its name telling no slot number.
        self._write_due_entry(project, queue, message_id, doc, latest)
        if is_named_entry(stale):
            self._unname(project, queue, message_id, doc)
        return latest

    def _leave_entry(self, project: str, queue: str, message_id: str, doc: Doc, entry: str) -> None:
        """The message ``doc`` is indexed otherwise now: its due entry ``entry`` goes (or,
        for a message claimable by its name, it is so no longer)."""
        if is_named_entry(entry):
            self._unname(project, queue, message_id, doc)
        else:
            self._delete_index_entry(entry)

    def _past_post(self, entry: str, now_ms: int) -> bool:
        """Whether the post of the message of index entry ``entry`` is over on any clock
        (``SwiftTimes.orphaned_after_ms``), so the message, if not found, is taken for gone."""
        message_id = entry.rsplit("/", 1)[1]
        return names.named_ms_of(message_id) + self._times.orphaned_after_ms < now_ms

    def _remove_orphan(self, project: str, queue: str, entry: str, now_ms: int) -> None:
        """The message of the due entry ``entry`` was not found (or its post not committed).
        Its post may still be writing it for the orphan grace after it was due, and the
        post's clock may lag this one (``SwiftTimes.orphaned_after_ms``); after that the
        entry goes, and a message of a post never committed with it.
        (Past that grace the message was read with ``known``: a read racing an overwrite of
        it answers 404, and its entry would go while it stays, never claimed again.)"""
        message_id = entry.rsplit("/", 1)[1]
        if not self._past_post(entry, now_ms):
            return
        if is_named_entry(entry):
            self._swift.delete(
                self._container(names.MESSAGES), self._message_name(project, queue, message_id)
            )
        else:
            self._delete_index_entry(entry)

    def _remove_if_expired(
        self, project: str, queue: str, entry: dict[str, Any], now_ms: int
    ) -> None:
        """Remove the message of an index entry listed as expired, once its document agrees
        (an edit may have given it a longer ttl since)."""
        message_id = entry["name"].rsplit("/", 1)[1]
        # An edit that gave it a longer ttl overwrote it: read as missing then, it would go.
        doc = self._read_message(project, queue, message_id, known=True)
        if doc is None or int(doc["e"]) <= now_ms:
            self._remove_message(project, queue, message_id, doc, None)
            self._delete_index_entry(entry["name"])

    def _take(
        self,
        project: str,
        queue: str,
        claim: Slot,
        limit: int,
        now_ms: int,
    ) -> list[Taken]:
        """Put up to ``limit`` claimable messages under ``claim``, oldest due first.

        Concurrent claims list the same entries, the oldest due, and all but one lose each
        slot. A claim that lost some spreads out (``storage.contention``): it lists
        ``CONTENDED_SPREAD`` times the entries it still wants and tries a random choice of
        them, so concurrent claims mostly try different messages (a claim alone keeps strict
        due order), each lost round spreading further. Entries it listed and did not try stay
        among its choices in later rounds, so a claim answers short once it has tried every
        entry due, or after ``CONTENDED_CLAIM_ROUNDS`` rounds (``CLAIM_ATTEMPTS`` that found
        nothing to try), not while an entry it passed over may still be free."""
        taken: list[Taken] = []
        untried: list[dict[str, Any]] = []
        cursor = DueCursor()
        spread, rounds_without_tries = 1, 0
        for _ in range(CONTENDED_CLAIM_ROUNDS):
            wanted = limit - len(taken)
            listed = min(wanted * spread, LIST_SCAN_BUDGET)
            more = self._due_entries(project, queue, now_ms, cursor, listed)
            untried += self._drop_expired(project, queue, more, now_ms)
            tried = contended_choice(untried, wanted)
            chosen = {id(e) for e in tried}
            untried = [e for e in untried if id(e) not in chosen]
            results = self._swift.each(
                lambda e: self._try_take(project, queue, e, claim, now_ms), tried
            )
            won = [t for t in results if t is not None]
            taken += won
            listed_all = len(more) < listed and not cursor.more_named
            if len(taken) >= limit or (listed_all and not untried):
                break  # all it wanted, or all there was
            if len(won) < len(tried):
                spread *= CONTENDED_SPREAD
            # Rounds that only page past claimed messages named at the front are bounded
            # as a listing is.
            rounds_without_tries += not tried
            if rounds_without_tries >= CLAIM_ATTEMPTS:
                break
        return sorted(taken, key=lambda t: (int(t.doc["d"]), t.message_id))

    def _drop_expired(
        self, project: str, queue: str, entries: list[dict[str, Any]], now_ms: int
    ) -> list[dict[str, Any]]:
        """``entries`` but those of expired messages, which are removed as they are met, so
        later claims do not list them."""
        fresh: list[dict[str, Any]] = []
        expired: list[dict[str, Any]] = []
        for entry in entries:
            unexpired = int(names.fields_of(entry["content_type"]).get("e", 0)) > now_ms
            (fresh if unexpired else expired).append(entry)
        self._swift.each(lambda e: self._remove_if_expired(project, queue, e, now_ms), expired)
        return fresh
