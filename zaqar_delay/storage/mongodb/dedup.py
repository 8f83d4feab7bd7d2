"""MongoDB's dedup records (``storage.dedup_reservation``): the dedup ids a queue remembers,
one document each.

``dedup``: {p: project, q: queue, i: dedup id, m: id of the message first posted with it,
e: ms until which it is remembered (that message's expiry), ex: e as a date (TTL index),
at: ms it was remembered, s: 1 once its message is stored}. The unique index on (p, q, i)
decides races: of concurrent posts with one id, exactly one insert succeeds. A record's
version is its ``_id`` (a new one's is its message id), and a write to it also names the
message it remembered, so a post never changes a record another post has taken over since.

A repeat that takes over the record of a post that is past its grace and has not stored its
message first fences the message's id (``fence``): should that post only have stalled, its
insert is then refused, and it answers 503 with nothing stored instead of storing the message
a second time.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pymongo
from pymongo.errors import BulkWriteError

from zaqar_delay.storage.dedup_reservation import Created, DedupRecord
from zaqar_delay.storage.mongodb.errors import duplicate_positions
from zaqar_delay.storage.mongodb.schema import as_date, live_per_queue

Doc = dict[str, Any]

# A message document is one stored (a fence's ``e`` is 0).
STORED_MESSAGE: Doc = {"e": {"$gt": 0}}
# Posting positions a fence tries for a message id (a clash of two ids' positions in one queue
# takes another).
FENCE_ATTEMPTS = 3


def fence(project: str, queue: str, message_id: str, until_ms: int, attempt: int) -> Doc:
    """A messages-collection document that keeps ``message_id`` from ever being stored: the
    post that named it is refused its insert (a duplicate ``_id``), however late it arrives.
    In the queue's scope (``p``, ``q``), so a sharded collection keeps it on the message's
    shard; expired (``e`` 0), so no read of the queue sees it; at a posting position (``k``)
    below every message's, derived from the id, so the queue's positions stay unique; removed
    by the TTL monitor with the id's record (``ex``)."""
    digest = hashlib.sha256(f"{message_id}:{attempt}".encode()).digest()
    position = -1 - int.from_bytes(digest[:7], "big")
    return {
        "_id": message_id,
        "p": project,
        "q": queue,
        "k": position,
        "e": 0,
        "ex": as_date(until_ms),
    }


# What a post reads of a record.
RECORD_FIELDS = {"i": 1, "m": 1, "e": 1, "at": 1, "s": 1}


def _fields(record: DedupRecord) -> Doc:
    """The fields a record's write sets (not its place: project, queue, id)."""
    return {
        "m": record.message_id,
        "e": record.expires_ms,
        "ex": as_date(record.expires_ms),
        "at": record.at_ms,
        "s": int(record.stored),
    }


def _record(doc: Doc) -> DedupRecord:
    """A record as read. One of an earlier release, without ``s``, was stored."""
    return DedupRecord(
        str(doc["i"]),
        str(doc["m"]),
        int(doc["e"]),
        int(doc.get("at", 0)),
        bool(doc.get("s", 1)),
        str(doc["_id"]),
    )


def _written(records: Sequence[DedupRecord]) -> Doc:
    """A filter matching these records while they remember these messages."""
    return {
        "_id": {"$in": [r.version for r in records]},
        "m": {"$in": [r.message_id for r in records]},
    }


class MongoDedupRecords:
    """The dedup records of every queue, in one collection."""

    def __init__(self, collection: pymongo.collection.Collection[Doc]) -> None:
        self._collection = collection

    def create(self, project: str, queue: str, records: Sequence[DedupRecord]) -> list[Created]:
        """One unordered insert of them all; the unique index refuses the ids remembered
        (whose records it does not read)."""
        documents = [
            {"_id": r.message_id, "p": project, "q": queue, "i": r.dedup_id, **_fields(r)}
            for r in records
        ]
        refused: set[int] = set()
        try:
            self._collection.insert_many(documents, ordered=False)
        except BulkWriteError as exc:
            duplicates = duplicate_positions(exc)
            if duplicates is None:
                raise
            refused = set(duplicates)
        return [
            (False, None) if i in refused else (True, _record(doc))
            for i, doc in enumerate(documents)
        ]

    def latest(self, project: str, queue: str, dedup_id: str) -> DedupRecord | None:
        found = self._collection.find_one({"p": project, "q": queue, "i": dedup_id}, RECORD_FIELDS)
        return None if found is None else _record(found)

    def reread(self, project: str, queue: str, record: DedupRecord) -> DedupRecord | None:
        found = self._collection.find_one({"_id": record.version}, RECORD_FIELDS)
        return None if found is None else _record(found)

    def replace(
        self, project: str, queue: str, old: DedupRecord, new: DedupRecord
    ) -> DedupRecord | None:
        """The old record's document, rewritten unless a concurrent post took it over, or its
        post withdrew it, first."""
        taken = self._collection.update_one(
            {"_id": old.version, "m": old.message_id}, {"$set": _fields(new)}
        )
        if not taken.modified_count:
            return None
        return dataclasses.replace(new, version=old.version)

    def confirm(self, project: str, queue: str, records: Sequence[DedupRecord]) -> None:
        self._collection.update_many({**_written(records), "s": 0}, {"$set": {"s": 1}})

    def forget(self, project: str, queue: str, records: Sequence[DedupRecord]) -> None:
        self._collection.delete_many(_written(records))

    def live_per_queue(self, project: str, most: int, now_ms: int) -> Counter[str]:
        """The project's records live at ``now_ms``, per queue, no further than ``most``."""
        return live_per_queue(self._collection, project, most, now_ms)

    def forget_queue(self, project: str, queue: str) -> None:
        self._collection.delete_many({"p": project, "q": queue})
