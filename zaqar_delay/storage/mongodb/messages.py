"""Messages on MongoDB: posting, listing, reading, deleting, editing and popping."""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pymongo

from zaqar_delay import errors
from zaqar_delay.models import (
    Batch,
    Deletion,
    ListPage,
    ListQuery,
    Message,
    MessageEdit,
    NewMessage,
    OverLimit,
    Posted,
    VersionedMetadata,
)
from zaqar_delay.storage import markers
from zaqar_delay.storage.base import ANY_METADATA_VERSION, metadata_version_of, stale_metadata
from zaqar_delay.storage.bounds import CLAIM_ATTEMPTS
from zaqar_delay.storage.dedup_reservation import DedupRecord
from zaqar_delay.storage.message_rules import check_claim, edited_expiry, hops_field
from zaqar_delay.storage.mongodb.common import (
    SCAN_FIELDS,
    Doc,
    message_of,
)
from zaqar_delay.storage.mongodb.dedup import FENCE_ATTEMPTS, STORED_MESSAGE, fence
from zaqar_delay.storage.mongodb.errors import duplicate_positions, translate_class_errors
from zaqar_delay.storage.mongodb.positions import Positions
from zaqar_delay.storage.mongodb.schema import as_date


@translate_class_errors
class MessageOps(Positions):
    """Every operation on the ``messages`` collection that no claim makes."""

    if TYPE_CHECKING:

        def _owe_pushes(
            self, project: str, queue: str, stored: Sequence[Doc], now_ms: int
        ) -> int: ...

        def _bring_pushes_forward(
            self, project: str, queue: str, message_id: str, due: tuple[int, int], now_ms: int
        ) -> int: ...

    def _documents(
        self,
        project: str,
        queue: str,
        messages: Sequence[NewMessage],
        client_id: str,
        now_ms: int,
    ) -> tuple[list[Doc], bool]:
        first, subscribed = self._reserve(project, queue, len(messages), now_ms)
        documents = []
        for i, message in enumerate(messages):
            due = now_ms + message.delay_ms
            expires = now_ms + message.ttl_s * 1000
            documents.append(
                {
                    "_id": secrets.token_hex(16),
                    "p": project,
                    "q": queue,
                    "k": first + i,
                    "b": message.body_json,
                    "u": client_id,
                    "t": message.ttl_s,
                    "cr": now_ms,
                    "e": expires,
                    "ex": as_date(expires),
                    "d": due,
                    "v": due,
                    "cid": None,
                    "ce": 0,
                    "cc": 0,
                    **hops_field(message.hops),
                }
            )
        return documents, subscribed

    def _post(self, project: str, queue: str, batch: Batch, now_ms: int) -> Posted:
        messages, client_id = batch.messages, batch.client_id
        documents, subscribed = self._documents(project, queue, messages, client_id, now_ms)
        reservation = self._dedup.reserve(
            project, queue, messages, [str(d["_id"]) for d in documents], now_ms
        )
        duplicate_of, remembered = reservation.duplicate_of, reservation.taken
        fresh = [d for i, d in enumerate(documents) if i not in duplicate_of]

        # The messages, then the pushes owed for them, then their dedup ids confirmed. If a
        # write fails, what was written is deleted again (and the dedup ids withdrawn) before
        # the error is reported, so a refused post leaves nothing. A crash of this process in
        # between leaves dedup ids unconfirmed, which a repeat completes or takes over
        # (dedup.py). (Multi-document transactions would also cover that crash, at the price
        # of a replica set and much slower posts.)
        push_due = 0
        if fresh:
            try:
                self._insert_fresh(project, queue, fresh, now_ms)
                if subscribed:
                    push_due = self._owe_pushes(project, queue, fresh, now_ms)
            except (pymongo.errors.PyMongoError, errors.StorageUnavailable):
                self._undo_post(project, queue, [d["_id"] for d in fresh], remembered)
                raise
            self._dedup.confirm(project, queue, remembered)
            self._wakeups.wake(project, queue)
        ids = [duplicate_of.get(i) or str(d["_id"]) for i, d in enumerate(documents)]
        return Posted(ids, tuple(sorted(duplicate_of)), push_due_ms=push_due)

    def _insert_fresh(self, project: str, queue: str, documents: list[Doc], now_ms: int) -> None:
        """Insert a post's new messages, in one ordered write when nothing stands in their way.
        pymongo sends a write again when its answer was lost, and a server that applied part
        of the first attempt (one that does not recognise retried writes) refuses the retry
        for duplicates: those are the post's own messages, stored (their ids and positions
        were made for this post alone). The rest are inserted by ``_insert_placed``, which
        also moves a message whose position another holds, and refuses a fenced one."""
        try:
            self._messages.insert_many(documents)
        except pymongo.errors.BulkWriteError as exc:
            if duplicate_positions(exc) is None:
                raise
            self._insert_placed(project, queue, documents, now_ms)

    def _undo_post(
        self,
        project: str,
        queue: str,
        message_ids: list[str],
        remembered: Sequence[DedupRecord],
    ) -> None:
        """Delete what a refused post wrote: its pushes, then its messages, then its dedup
        ids, stopping at the first write the store refuses. So a dedup id left behind is
        unconfirmed, naming a message that is either gone or stored with its pushes perhaps
        not owed, which a repeat completes (dedup.py)."""
        with contextlib.suppress(pymongo.errors.PyMongoError):
            self._pushes.delete_many(
                {**self._queue_filter(project, queue), "m": {"$in": message_ids}}
            )
            self._messages.delete_many({"_id": {"$in": message_ids}, **STORED_MESSAGE})
            self._dedup.forget(project, queue, remembered)

    def _complete_post(self, project: str, queue: str, record: DedupRecord, now_ms: int) -> bool:
        """Whether the message of ``record`` is stored, once the pushes its post may not have
        owed yet are owed (a push owed already stays as it is). A message not stored is
        fenced first (``dedup.fence``), so its post can no longer store it."""
        for attempt in range(FENCE_ATTEMPTS):
            fenced = fence(project, queue, record.message_id, record.expires_ms, attempt)
            try:
                self._messages.insert_one(fenced)
                return False
            except pymongo.errors.DuplicateKeyError:
                found = self._messages.find_one({"_id": record.message_id}, {"d": 1, "e": 1})
            if found is not None and found["e"] == 0:
                return False  # fenced by another repeat
            if found is not None:
                self._owe_pushes(project, queue, [found], now_ms)
                return True
            # Absent: the fence's position was another fence's; it takes another.
        raise errors.StorageUnavailable("The message of a dedup id could not be fenced.")

    def receive_dead_letters(self, project: str, over: OverLimit, now_ms: int) -> None:
        queue = over.queue
        documents, subscribed = self._documents(project, queue, over.copies(), "", now_ms)
        for document, message in zip(documents, over.messages, strict=True):
            document["_id"], document["u"] = message.id, message.client_id
        # A copy stored by an earlier attempt (the same id) is left as it is.
        self._insert_placed(project, queue, documents, now_ms)
        self._wakeups.wake(project, queue)
        # Owed for every copy, the ones an earlier attempt stored too: that attempt may have
        # failed before it owed them. A push owed already stays as it is.
        if subscribed:
            self._owe_pushes(project, queue, documents, now_ms)

    def post_if_current(
        self, project: str, queue: str, batch: Batch, now_ms: int, metadata_version: str
    ) -> Posted | VersionedMetadata:
        """Reads the metadata text first: the check is not atomic with the write (a change in
        between is stored under; Redis checks inside its script)."""
        if metadata_version == ANY_METADATA_VERSION:
            return self._post(project, queue, batch, now_ms)
        found = self._queues.find_one(self._queue_filter(project, queue), {"m": 1})
        stored = None if found is None else str(found["m"])
        stale = stale_metadata(stored, metadata_version)
        if stale is not None:
            return stale
        posted = self._post(project, queue, batch, now_ms)
        return dataclasses.replace(posted, metadata_version=metadata_version_of(stored or "{}"))

    def remembers_dedup_ids(
        self, project: str, queue: str, dedup_ids: Sequence[str], now_ms: int
    ) -> bool:
        return self._dedup.remembers(project, queue, dedup_ids, now_ms)

    def list_messages(self, project: str, queue: str, listing: ListQuery, now_ms: int) -> ListPage:
        after = markers.posting(listing.marker)
        query: Doc = self._queue_filter(project, queue)
        if isinstance(after, str):
            found = self._messages.find_one({**query, "_id": after}, {"k": 1})
            after = None if found is None else int(found["k"])
        if after is not None:
            query["k"] = {"$gt": after}
        scanned = list(
            self._messages.find(query, SCAN_FIELDS).sort("k", 1).limit(self._list_scan_budget)
        )
        kept, cursor = [], None
        for doc in scanned:
            cursor = doc["k"]
            if (
                doc["e"] > now_ms
                and (listing.echo or doc["u"] != listing.client_id)
                and (listing.include_claimed or doc["ce"] <= now_ms)
                and (listing.include_delayed or doc["d"] <= now_ms)
            ):
                kept.append(doc["_id"])
                if len(kept) == listing.limit:
                    break
        more = len(kept) < listing.limit and len(scanned) == self._list_scan_budget
        found = {d["_id"]: d for d in self._messages.find({**query, "_id": {"$in": kept}})}
        messages = tuple(message_of(found[i], now_ms) for i in kept if i in found)
        next_marker = str(cursor) if cursor is not None and (messages or more) else None
        return ListPage(messages, next_marker)

    def list_messages_by_due(
        self, project: str, queue: str, listing: ListQuery, now_ms: int
    ) -> ListPage:
        after = markers.due(listing.marker)
        if after is not None and not after[1].isdigit():
            raise errors.InvalidParameter('The "marker" parameter is invalid.')
        scope = self._queue_filter(project, queue)
        self._return_lapsed_claims(scope, self._policy(project, queue), now_ms)
        query: Doc = {**scope, "ce": 0, "e": {"$gt": now_ms}}
        if not listing.include_delayed:
            query["v"] = {"$lte": now_ms}
        if not listing.echo:
            query["u"] = {"$ne": listing.client_id}
        if after is not None:
            due_ms, seq = after[0], int(after[1])
            query["$or"] = [{"v": {"$gt": due_ms}}, {"v": due_ms, "k": {"$gt": seq}}]
        docs = list(
            self._messages.find(query)
            .sort([("v", 1), ("k", 1)])
            .limit(listing.limit)
            .hint("claimable")
        )
        # Unclaimed documents have v == d, so the marker is (due, sequence).
        next_marker = markers.make_due(docs[-1]["v"], docs[-1]["k"]) if docs else None
        return ListPage(tuple(message_of(d, now_ms) for d in docs), next_marker)

    def get_messages(
        self, project: str, queue: str, ids: Sequence[str], now_ms: int
    ) -> list[Message]:
        if not ids:
            return []
        query = {
            **self._queue_filter(project, queue),
            "_id": {"$in": list(ids)},
            "e": {"$gt": now_ms},
        }
        found = {d["_id"]: d for d in self._messages.find(query)}
        return [message_of(found[i], now_ms) for i in ids if i in found]

    def delete_message(
        self, project: str, queue: str, message_id: str, claim_id: str | None, now_ms: int
    ) -> bool:
        scope = {**self._queue_filter(project, queue), "_id": message_id}
        for _ in range(CLAIM_ATTEMPTS):
            doc = self._messages.find_one(scope, {"e": 1, "cid": 1, "ce": 1})
            if doc is None:
                return False
            if doc["e"] <= now_ms:
                self._messages.delete_one(scope)
                return False
            self._check_claim(project, queue, doc, claim_id, now_ms)
            # Delete only if nothing changed since the read; otherwise decide again.
            guard = {**scope, "cid": doc["cid"], "ce": doc["ce"]}
            if self._messages.delete_one(guard).deleted_count:
                return True
        raise errors.StorageUnavailable("The message could not be deleted.")

    def _check_claim(
        self, project: str, queue: str, doc: Doc, claim_id: str | None, now_ms: int
    ) -> None:
        """Refuse a change to a claimed message unless ``claim_id`` names its live claim."""
        holder = doc["cid"] if doc["cid"] is not None and doc["ce"] > now_ms else None
        check_claim(holder, claim_id, lambda c: bool(self._live_claim(project, queue, c, now_ms)))

    def edit_message(self, project: str, queue: str, edit: MessageEdit, now_ms: int) -> int:
        message_id, claim_id = edit.message_id, edit.claim_id
        scope = {**self._queue_filter(project, queue), "_id": message_id}
        for _ in range(CLAIM_ATTEMPTS):
            doc = self._messages.find_one(
                {**scope, "e": {"$gt": now_ms}}, {"cid": 1, "ce": 1, "cr": 1, "d": 1}
            )
            if doc is None:
                raise errors.MessageDoesNotExist(message_id, queue, project)
            self._check_claim(project, queue, doc, claim_id, now_ms)
            change: Doc = {}
            expires = edited_expiry(edit, int(doc["cr"]), now_ms)
            if expires is not None:
                change.update({"t": edit.ttl_s, "e": expires, "ex": as_date(expires)})
            if edit.body_json is not None:
                change["b"] = edit.body_json
            if edit.due_ms is not None:
                change.update({"d": edit.due_ms, "v": edit.due_ms, "cid": None, "ce": 0})
            # Matched on the claim as read, so a claim taken since is never overwritten.
            edited = self._messages.update_one(
                {**scope, "cid": doc["cid"], "ce": doc["ce"]}, {"$set": change}
            )
            if not edited.matched_count:
                continue
            if edit.due_ms is None:
                return 0
            self._wakeups.wake(project, queue)
            if edit.due_ms >= int(doc["d"]):
                return 0
            due = (edit.due_ms, int(doc["d"]))
            return self._bring_pushes_forward(project, queue, message_id, due, now_ms)
        raise errors.StorageUnavailable("The message could not be edited.")

    def delete_messages(
        self, project: str, queue: str, deletion: Deletion, now_ms: int
    ) -> list[str]:
        ids, claim_ids = deletion.ids, deletion.claim_ids
        if not ids:
            return []
        query = {**self._queue_filter(project, queue), "_id": {"$in": list(ids)}}
        found = list(self._messages.find(query, {"e": 1, "cid": 1, "ce": 1}))
        if claim_ids is not None:
            allowed = set(claim_ids)
            if any(d["ce"] > now_ms and d["cid"] not in allowed for d in found):
                raise errors.MessageIsClaimed()
        if found:  # a retried delete finds nothing, and is done in one round trip
            self._messages.delete_many(query)
        # As read just before: a delete racing for the same message reports it too.
        live = {d["_id"] for d in found if d["e"] > now_ms}
        return [i for i in dict.fromkeys(ids) if i in live]
