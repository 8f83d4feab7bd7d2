"""Idempotent posting on MongoDB: the dedup ids a queue remembers, one document each.

``dedup``: {p: project, q: queue, i: dedup id, m: id of the message first posted with it,
e: ms until which it is remembered (that message's expiry), ex: e as a date (TTL index),
at: ms it was remembered, s: 1 once its message is stored}. The unique index on (p, q, i)
decides races: of concurrent posts with one id, exactly one insert succeeds and the others
read its message id.

Ids are remembered before the messages are inserted, so a consumer can never see a message
twice; if the insert (or the pushes owed for the messages) then fails, :meth:`DedupIds.forget`
withdraws them again, and once the post is stored whole :meth:`DedupIds.confirm` marks them.
A repeat that meets an unconfirmed id waits for its post to confirm it, until
``FIRST_POST_GRACE_MS`` after the id was remembered. Unconfirmed then, that post failed part-way
and could not undo it (MongoDB went away, or the process died): if its message is stored, the
repeat completes it (owes the pushes it may not have owed) and confirms it; if not, the id is
remembered afresh. So a repeat is never answered with the id of a message that was never
stored, nor of one never pushed. A post of several ids that meets one being stored gives back
the ids it took and takes them again one at a time in id order, waiting where it must: posts
wait only in that order, so none waits on a post that waits on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import pymongo
from pymongo.errors import BulkWriteError, DuplicateKeyError

from zaqar_delay import errors
from zaqar_delay.storage.bounds import FIRST_POST_GRACE_MS, FIRST_POST_POLL_S
from zaqar_delay.storage.mongodb.errors import duplicate_positions
from zaqar_delay.storage.mongodb.schema import as_date

Doc = dict[str, Any]

# Rounds one id may take when concurrent posts and the TTL monitor race over a lapsed record.
REMEMBER_ATTEMPTS = 3
# _settle's answer, without waiting, for an id whose first post is still storing its message.
PENDING = "\x00pending"

# What a post reads of a record.
RECORD_FIELDS = {"p": 1, "q": 1, "m": 1, "e": 1, "at": 1, "s": 1}

# A record a post took: (its _id, its message id).
Taken = tuple[Any, str]


def _records(taken: Sequence[Taken]) -> Doc:
    """A filter matching these records while they remember these messages (found by _id)."""
    return {"_id": {"$in": [r for r, _ in taken]}, "m": {"$in": [m for _, m in taken]}}


class DedupIds:
    """The dedup ids of every queue, in one collection. ``complete(project, queue, message
    id, now ms)``: whether a message is stored, once the pushes its post may not have owed
    are owed (asked of an unconfirmed id's message when its post's time is up)."""

    def __init__(
        self,
        collection: pymongo.collection.Collection[Doc],
        complete: Callable[[str, str, str, int], bool],
    ) -> None:
        self._collection = collection
        self._complete = complete

    def remember(
        self,
        project: str,
        queue: str,
        candidates: Sequence[tuple[str, str, int]],
        now_ms: int,
    ) -> tuple[dict[str, str], list[Taken]]:
        """Remember each (dedup id, message id, expires ms) unless the queue already does.

        Returns {dedup id: remembered message id} for the ids that were already remembered
        and live at ``now_ms`` (waiting for a message still being stored); the others are
        now remembered, unconfirmed until :meth:`confirm`, with the given message id, and
        returned second as :meth:`confirm` and :meth:`forget` take them. Dedup ids must be
        distinct.
        """
        if not candidates:
            return {}, []
        documents: list[Doc] = [
            {
                # Records are confirmed and withdrawn by _id: a new one's is its message id.
                "_id": m,
                "p": project,
                "q": queue,
                "i": i,
                "m": m,
                "e": e,
                "ex": as_date(e),
                "at": now_ms,
                "s": 0,
            }
            for i, m, e in candidates
        ]
        wait = len(documents) == 1
        answers = {
            doc["i"]: self._settle(doc, now_ms, wait=wait) for doc in self._insert(documents)
        }
        if PENDING in answers.values():
            self.forget([(doc["_id"], doc["m"]) for doc in documents])
            answers = {}
            for doc in sorted(documents, key=lambda doc: str(doc["i"])):
                if self._insert([doc]):
                    answers[doc["i"]] = self._settle(doc, now_ms, wait=True)
        earlier = {i: m for i, m in answers.items() if m is not None}
        taken = [(doc["_id"], doc["m"]) for doc in documents if doc["i"] not in earlier]
        return earlier, taken

    def _insert(self, documents: list[Doc]) -> list[Doc]:
        """Insert ``documents``; the ones an id already remembered refused."""
        try:
            self._collection.insert_many([dict(doc) for doc in documents], ordered=False)
            return []
        except BulkWriteError as exc:
            duplicates = duplicate_positions(exc)
            if duplicates is None:
                raise
            return [documents[i] for i in duplicates]

    def _settle(self, document: Doc, now_ms: int, *, wait: bool) -> str | None:
        """An id whose insert clashed: the message id remembered for it, or None when the
        record had lapsed, or its post failed, and now remembers ``document`` instead (its
        ``_id`` then set to the record's); without ``wait``, ``PENDING`` while its first
        post may still be storing it."""
        scope = {k: document[k] for k in ("p", "q", "i")}
        for _ in range(REMEMBER_ATTEMPTS):
            existing = self._collection.find_one(scope, RECORD_FIELDS)
            if existing is None:
                try:
                    self._collection.insert_one(dict(document))
                    return None
                except DuplicateKeyError:
                    continue
            if existing["e"] > now_ms:
                stored, existing = self._first_post_stored(existing, now_ms, wait=wait)
                if stored is None:
                    return PENDING
                if stored:
                    return str(existing["m"])
            # Lapsed, or its post failed: taken over unless a concurrent post took it, or its
            # post withdrew it, first.
            taken = self._collection.update_one(
                {"_id": existing["_id"], "m": existing["m"]},
                {"$set": {k: document[k] for k in ("m", "e", "ex", "at", "s")}},
            )
            if taken.modified_count:
                document["_id"] = existing["_id"]
                return None
        raise errors.StorageUnavailable("A dedup id kept changing hands; retry the post.")

    def _first_post_stored(
        self, record: Doc, now_ms: int, *, wait: bool
    ) -> tuple[bool | None, Doc]:
        """Whether the post that remembered the live ``record`` stored its message, waiting
        while that post may still be storing it (without ``wait``: None then); with the
        record as last read (as first read once withdrawn). Past that time an unconfirmed
        record's message, if stored, is completed and the record confirmed. A record of an
        earlier release, without ``s``, was stored."""
        elapsed_ms = now_ms - int(record.get("at", now_ms))
        deadline = time.monotonic() + (FIRST_POST_GRACE_MS - elapsed_ms) / 1000
        while not record.get("s", 1):
            if time.monotonic() >= deadline:
                if not self._complete(record["p"], record["q"], record["m"], now_ms):
                    return False, record
                self._collection.update_one(
                    {"_id": record["_id"], "m": record["m"]}, {"$set": {"s": 1}}
                )
                return True, record
            if not wait:
                return None, record
            time.sleep(FIRST_POST_POLL_S)
            found = self._collection.find_one({"_id": record["_id"]}, RECORD_FIELDS)
            if found is None:
                return False, record
            if found["e"] <= now_ms:
                return False, found
            record = found
        return True, record

    def confirm(self, taken: Sequence[Taken]) -> None:
        """Mark the records :meth:`remember` took as stored."""
        if taken:
            self._collection.update_many({**_records(taken), "s": 0}, {"$set": {"s": 1}})

    def forget(self, taken: Sequence[Taken]) -> None:
        """Withdraw the records :meth:`remember` took (their post failed, or gives them
        back); one another post has taken since stays."""
        if taken:
            self._collection.delete_many(_records(taken))

    def forget_queue(self, project: str, queue: str) -> None:
        self._collection.delete_many({"p": project, "q": queue})
