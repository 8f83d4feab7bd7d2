"""Messages on Swift: posting, listing, reading and deleting (edits: ``edits.py``)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Sequence
from concurrent.futures import Future

from zaqar_delay import errors
from zaqar_delay.models import (
    Batch,
    Deletion,
    ListPage,
    ListQuery,
    Message,
    NewMessage,
    OverLimit,
    Posted,
    VersionedMetadata,
)
from zaqar_delay.storage import markers
from zaqar_delay.storage.base import ANY_METADATA_VERSION, metadata_version_of, stale_metadata
from zaqar_delay.storage.dedup_reservation import DedupRecord, DedupReservation
from zaqar_delay.storage.message_rules import hops_field
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.common import Doc, delete_at, message_content_type, message_of
from zaqar_delay.storage.swift.pushes import PushOps
from zaqar_delay.storage.swift.slots import Slot
from zaqar_delay.storage.swift.timing import elapsed_ms


class MessageOps(PushOps):
    """Every operation on messages that no claim or edit makes; a post owes its pushes
    (``PushOps``)."""

    _dedup: DedupReservation

    # -- posting -------------------------------------------------------------------------------

    def _store(
        self,
        project: str,
        queue: str,
        stored: Sequence[tuple[str, Doc]],
        started: float,
        reserved: bool,
    ) -> None:
        """Post ``stored``: the messages, claimable by their names (no index entry is
        written), then, for several messages, the object that commits them (``bt`` in each
        names it), which one write creates: a post is read whole or not at all. If a write
        fails, what was written is deleted again before the error is raised. The commit is
        sent only within ``SwiftTimes.post_deadline_ms`` of ``started`` (the post's start,
        ``time.monotonic()``), and so is a lone message that ``reserved`` dedup ids: later,
        claimers may be removing the messages of several as uncommitted, or a repeat taking
        the dedup ids over, before it lands, and the post is refused (and undone) instead."""
        post = _post_of(stored)
        try:
            if reserved and stored and not post:
                self._check_deadline(started)
            self._swift.each(lambda item: self._write_message(project, queue, *item), stored)
            if post:
                self._check_deadline(started)
                expires_ms = max(int(doc["e"]) for _, doc in stored)
                self._swift.put(
                    self._container(names.MESSAGES),
                    self._post_name(project, queue, post),
                    b"",
                    names.CONTENT_TYPE,
                    delete_at(expires_ms),
                )
        except errors.StorageUnavailable:
            self._undo_post(project, queue, stored, post)
            raise
        if post:
            self._committed_posts.learn(self._post_name(project, queue, post), True)

    def _check_deadline(self, started: float) -> None:
        if elapsed_ms(started) >= self._times.post_deadline_ms:
            raise errors.StorageUnavailable("Swift was too slow for the post to be stored.")

    def _undo_post(
        self, project: str, queue: str, stored: Sequence[tuple[str, Doc]], post: str
    ) -> None:
        """Delete what a refused post wrote, the object that commits it first: while that
        may exist, no message is deleted, so the post is never seen in part."""
        with contextlib.suppress(errors.StorageUnavailable):
            if post:
                self._swift.delete(
                    self._container(names.MESSAGES), self._post_name(project, queue, post)
                )
            self._swift.each(
                lambda item: self._remove_message(project, queue, item[0], item[1], None, slots=0),
                stored,
            )

    def _copy(self, project: str, queue: str, copies: Sequence[tuple[str, Doc]]) -> None:
        """Store dead-letter copies, each created only if its id is not stored yet (an earlier
        attempt's). Each is whole by itself: a failure part-way leaves copies that the next
        attempt skips."""
        self._swift.each(
            lambda item: self._write_due_entry(project, queue, item[0], item[1], Slot()), copies
        )
        self._swift.each(
            lambda item: self._create_message(project, queue, item[0], item[1]), copies
        )

    def _create_message(self, project: str, queue: str, message_id: str, doc: Doc) -> bool:
        """Store the message, indexed by its due entry, only if its id is not stored yet.
        Read first: an edit, a claim or a release replacing the copy an earlier attempt
        stored hides it from a create-only write at that moment, which would store this
        copy over the changed one."""
        return self._swift.create(
            self._container(names.MESSAGES),
            self._message_name(project, queue, message_id),
            json.dumps(doc).encode(),
            message_content_type(doc),
            read_first=True,
        )

    @staticmethod
    def _document(message: NewMessage, client_id: str, now_ms: int) -> Doc:
        return {
            "b": message.body_json,
            "u": client_id,
            "t": message.ttl_s,
            "cr": now_ms,
            "e": now_ms + message.ttl_s * 1000,
            "d": now_ms + message.delay_ms,
            **hops_field(message.hops),
        }

    def _post(
        self,
        project: str,
        queue: str,
        batch: Batch,
        now_ms: int,
        subscribed: Future[list[str]],
        queue_exists: bool,
    ) -> Posted:
        """``subscribed``: the reading of the queue's live subscriptions, started by the
        caller and awaited only once the messages are stored, since nothing before needs it;
        ``queue_exists``: its metadata was just read, so it is not created again."""
        messages, client_id = batch.messages, batch.client_id
        started = time.monotonic()
        documents = [{**self._document(m, client_id, now_ms), "i": 1} for m in messages]
        ids = names.new_ids([int(doc["d"]) for doc in documents])
        # Independent of the dedup ids, and made meanwhile: the queue created if absent.
        queue_made = self._swift.submit(
            lambda: None if queue_exists else self._ensure_queue(project, queue, now_ms)
        )
        reservation = self._dedup.reserve(project, queue, messages, ids, now_ms)
        duplicate_of, generations = reservation.duplicate_of, reservation.taken
        queue_made.result()
        fresh = [(ids[i], documents[i]) for i in range(len(ids)) if i not in duplicate_of]
        if len(fresh) > 1:
            fresh = [(mid, {**doc, "bt": fresh[0][0]}) for mid, doc in fresh]
        # The messages, then the pushes owed for them, then their dedup ids confirmed; a
        # refused write undoes what was written before the error is reported. Undoing the
        # pushes stops at the first write Swift refuses too, leaving the dedup ids
        # unconfirmed: like a crash in between, a repeat then completes the post or takes
        # the ids over (dedup.py).
        try:
            self._store(project, queue, fresh, started, reserved=bool(generations))
        except errors.StorageUnavailable:
            self._dedup.forget(project, queue, generations)
            raise
        subscriptions = subscribed.result()
        try:
            push_due = self._owe_pushes(project, queue, fresh, now_ms, subscriptions)
        except errors.StorageUnavailable:
            with contextlib.suppress(errors.StorageUnavailable):
                self._unowe_pushes(project, queue, fresh, subscriptions)
                self._undo_post(project, queue, fresh, _post_of(fresh))
                self._dedup.forget(project, queue, generations)
            raise
        self._dedup.confirm(project, queue, generations)
        return Posted(
            [duplicate_of.get(i) or ids[i] for i in range(len(ids))],
            tuple(sorted(duplicate_of)),
            push_due_ms=push_due,
        )

    def _complete_post(self, project: str, queue: str, record: DedupRecord, now_ms: int) -> bool:
        """Whether the message of ``record`` is stored, once the pushes its post may not have
        owed yet are owed (owing one again is a second delivery at worst). Asked once the
        post's grace (``SwiftTimes.first_post_grace_ms``) is over, when a post that reserved
        dedup ids has stored itself or never will (``_store``'s deadline): nothing to fence."""
        message_id = record.message_id
        # Read as missing while a claim overwrites it, the message would be posted twice.
        stored = self._read_message(project, queue, message_id, known=True)
        if stored is None:
            return False
        self._owe_pushes(project, queue, [(message_id, stored)], now_ms)
        return True

    def receive_dead_letters(self, project: str, over: OverLimit, now_ms: int) -> None:
        queue = over.queue
        self._ensure_queue(project, queue, now_ms)
        stored = [
            (message.id, self._document(copy, message.client_id, now_ms))
            for message, copy in zip(over.messages, over.copies(), strict=True)
        ]
        # Create-only and keyed by id: a copy an earlier attempt stored is not stored again.
        # Its pushes are owed again, since that attempt may have failed before it owed them.
        self._copy(project, queue, stored)
        self._owe_pushes(project, queue, stored, now_ms)

    def post_if_current(
        self, project: str, queue: str, batch: Batch, now_ms: int, metadata_version: str
    ) -> Posted | VersionedMetadata:
        """Checks the metadata as this process read it at most ``metadata_cache_ms`` ago
        (writes of it wait that long before they answer): the check is not atomic with the
        write (a change in between is stored under, as on MongoDB). The queue's
        subscriptions are read while the messages are written, and only if the queue is
        marked as possibly having some (``names.SUBSCRIBED``)."""
        if metadata_version == ANY_METADATA_VERSION:
            # No metadata read: the subscriptions are looked up whatever the queue's mark.
            lookup = self._swift.submit(self._live_subscription_ids, project, queue, now_ms)
            return self._post(project, queue, batch, now_ms, lookup, False)
        stored, may_have_subscriptions = self._recent_queue_object(project, queue)
        stale = stale_metadata(stored, metadata_version)
        if stale is not None:
            return stale
        subscribed: Future[list[str]] = Future()
        if may_have_subscriptions:
            subscribed = self._swift.submit(self._live_subscription_ids, project, queue, now_ms)
        else:
            subscribed.set_result([])
        posted = self._post(project, queue, batch, now_ms, subscribed, stored is not None)
        return dataclasses.replace(posted, metadata_version=metadata_version_of(stored or "{}"))

    # -- reading -------------------------------------------------------------------------------

    def _read_messages(
        self, project: str, queue: str, ids: Sequence[str], *, known: bool = False
    ) -> dict[str, Doc]:
        docs = self._swift.each(lambda i: self._read_message(project, queue, i, known=known), ids)
        return {i: doc for i, doc in zip(ids, docs, strict=True) if doc is not None}

    def remembers_dedup_ids(
        self, project: str, queue: str, dedup_ids: Sequence[str], now_ms: int
    ) -> bool:
        return self._dedup.remembers(project, queue, dedup_ids, now_ms)

    def list_messages(self, project: str, queue: str, listing: ListQuery, now_ms: int) -> ListPage:
        after = markers.posting(listing.marker)
        prefix = names.queue_prefix(project, queue)
        # A marker is a message id (next links name the last message examined); anything
        # else names nothing and lists from the start, as Zaqar does.
        start = prefix + after if isinstance(after, str) and names.is_message_id(after) else ""
        # Messages sort before the objects that commit posts (``b/``), digits before letters.
        listed = [
            entry
            for entry in self._swift.listing(
                self._container(names.MESSAGES),
                prefix,
                marker=start,
                limit=self._list_scan_budget,
            )
            if "/" not in entry["name"][len(prefix) :]
        ]
        committed = {id(entry) for entry in self._committed_listing(project, queue, listed)}
        ids = [entry["name"][len(prefix) :] for entry in listed]
        slots = self._slots_of(project, queue, ids) if ids else {}
        kept, cursor = [], None
        for message_id, entry in zip(ids, listed, strict=True):
            cursor = message_id
            fields = names.fields_of(entry["content_type"])
            claimed = slots.get(message_id, Slot()).live(now_ms)
            if (
                id(entry) in committed
                and int(fields["e"]) > now_ms
                and (listing.echo or fields["u"] != listing.client_id)
                and (listing.include_claimed or not claimed)
                and (listing.include_delayed or int(fields["d"]) <= now_ms)
            ):
                kept.append(message_id)
                if len(kept) == listing.limit:
                    break
        more = len(kept) < listing.limit and len(listed) == self._list_scan_budget
        docs = self._read_messages(project, queue, kept)
        found = tuple(
            message_of(i, docs[i], slots.get(i, Slot()), now_ms) for i in kept if i in docs
        )
        next_marker = cursor if cursor is not None and (found or more) else None
        return ListPage(found, next_marker)

    def get_messages(
        self, project: str, queue: str, ids: Sequence[str], now_ms: int
    ) -> list[Message]:
        named = [i for i in dict.fromkeys(ids) if names.is_message_id(i)]
        docs = self._read_messages(project, queue, named, known=True)
        alive = [i for i in named if i in docs and int(docs[i]["e"]) > now_ms]
        slots = self._swift.each(lambda i: self._current_slot(project, queue, i), alive)
        by_id = {
            i: message_of(i, docs[i], slot, now_ms) for i, slot in zip(alive, slots, strict=True)
        }
        return [by_id[i] for i in ids if i in by_id]

    # -- deleting ------------------------------------------------------------------------------

    def delete_message(
        self, project: str, queue: str, message_id: str, claim_id: str | None, now_ms: int
    ) -> bool:
        if not names.is_message_id(message_id):
            return False
        if claim_id is not None and self._delete_held(project, queue, message_id, claim_id, now_ms):
            return True
        # Both are needed for any message there is to delete: read at once.
        latest = self._swift.submit(self._current_slot, project, queue, message_id)
        doc = self._read_message(project, queue, message_id, known=True)
        if doc is None:
            return False
        slot = latest.result()
        alive = int(doc["e"]) > now_ms
        if alive:
            self._check_claim(project, queue, slot, claim_id, now_ms)
        self._remove_message(project, queue, message_id, doc, slot, _held(doc, slot, now_ms))
        return alive

    def _delete_held(
        self, project: str, queue: str, message_id: str, claim_id: str, now_ms: int
    ) -> bool:
        """Delete the message if ``claim_id``'s live claim holds it, from the claim's slot
        alone: the message need not be read, since the claim made its entry a claimed one and
        keeps it alive. False (nothing done) otherwise, for the full checks to decide."""
        numbers = self._slot_numbers(project, queue, claim_id)
        n = None if numbers is None else numbers.get(message_id)
        if n is None:
            return False
        slot = self._holding_slot(project, queue, message_id, n, claim_id, now_ms)
        if slot is None:
            return False
        self._remove_message(project, queue, message_id, None, slot, held=True)
        return True

    def delete_messages(
        self, project: str, queue: str, deletion: Deletion, now_ms: int
    ) -> list[str]:
        ids, claim_ids = deletion.ids, deletion.claim_ids
        named = [i for i in dict.fromkeys(ids) if names.is_message_id(i)]
        docs = self._read_messages(project, queue, named, known=True)
        present = [i for i in named if i in docs]
        slots = dict(
            zip(
                present,
                self._swift.each(lambda i: self._current_slot(project, queue, i), present),
                strict=True,
            )
        )
        if claim_ids is not None:
            allowed = set(claim_ids)
            for message_id in present:
                slot = slots[message_id]
                if slot.live(now_ms) and slot.claim_id not in allowed:
                    raise errors.MessageIsClaimed()
        self._swift.each(
            lambda i: self._remove_message(
                project,
                queue,
                i,
                docs[i],
                slots[i],
                _held(docs[i], slots[i], now_ms),
            ),
            present,
        )
        return [i for i in present if int(docs[i]["e"]) > now_ms]


def _held(doc: Doc, latest: Slot, now_ms: int) -> bool:
    """Whether a live claim holds the message ``doc`` whose latest slot is ``latest``: its
    index entry is then a claimed one."""
    return int(doc["e"]) > now_ms and latest.live(now_ms)


def _post_of(stored: Sequence[tuple[str, Doc]]) -> str:
    """The id that names the object committing a post of several messages ("": one)."""
    return stored[0][0] if len(stored) > 1 else ""
