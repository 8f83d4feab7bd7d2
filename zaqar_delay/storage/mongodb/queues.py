"""Queues on MongoDB: the ``queues`` collection (metadata, sequence) and per-queue counts."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from pymongo import UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError

from zaqar_delay import errors
from zaqar_delay.models import (
    MessageRef,
    Metadata,
    QueueInfo,
    QueueStats,
)
from zaqar_delay.storage.mongodb import schema
from zaqar_delay.storage.mongodb.common import (
    Doc,
    MongoBase,
)
from zaqar_delay.storage.mongodb.errors import duplicate_positions, translate_class_errors


@translate_class_errors
class QueueOps(MongoBase):
    """Create, read, change, list, count and purge queues."""

    # -- queues --------------------------------------------------------------------------------

    def create_queue(self, project: str, queue: str, metadata: Metadata, now_ms: int) -> bool:
        document = {"p": project, "q": queue, "m": json.dumps(metadata), **_created(now_ms)}
        try:
            self._queues.insert_one(document)
        except DuplicateKeyError:
            return False
        return True

    def get_metadata(self, project: str, queue: str) -> Metadata | None:
        found = self._queues.find_one(self._queue_filter(project, queue), {"m": 1})
        return None if found is None else dict(json.loads(found["m"]))

    def get_metadata_many(self, project: str, queues: Sequence[str]) -> list[Metadata | None]:
        """One query."""
        wanted = {"p": project, "q": {"$in": list(queues)}}
        found = {
            doc["q"]: dict(json.loads(doc["m"]))
            for doc in self._queues.find(wanted, {"q": 1, "m": 1})
        }
        return [found.get(queue) for queue in queues]

    def set_metadata(self, project: str, queue: str, metadata: Metadata) -> None:
        result = self._queues.update_one(
            self._queue_filter(project, queue), {"$set": {"m": json.dumps(metadata)}}
        )
        if result.matched_count == 0:
            raise errors.QueueDoesNotExist(queue, project)

    def put_metadata_many(
        self, project: str, metadata: Mapping[str, Metadata], now_ms: int
    ) -> None:
        """One bulk write of upserts. Two upserts of one new queue may race: the one the
        unique index refused is sent again, and then finds the queue."""
        if not metadata:
            return
        writes = [
            UpdateOne(
                self._queue_filter(project, queue),
                {"$set": {"m": json.dumps(one)}, "$setOnInsert": _created(now_ms)},
                upsert=True,
            )
            for queue, one in metadata.items()
        ]
        try:
            self._queues.bulk_write(writes, ordered=False)
        except BulkWriteError as exc:
            refused = duplicate_positions(exc)
            if refused is None:
                raise
            self._queues.bulk_write([writes[i] for i in refused], ordered=False)

    def delete_queue(self, project: str, queue: str) -> None:
        scope = self._queue_filter(project, queue)
        # Contents first: a failure part-way leaves a queue to delete again, not orphans.
        self._messages.delete_many(scope)
        self._claims.delete_many(scope)
        self._dedup_records.forget_queue(project, queue)
        self._subscriptions.delete_many(scope)
        self._pushes.delete_many(scope)
        self._push_limits.delete_many(scope)
        self._queues.delete_one(scope)

    def list_queues(
        self, project: str, marker: str | None, limit: int, detailed: bool
    ) -> list[QueueInfo]:
        query: Doc = {"p": project}
        if marker:
            query["q"] = {"$gt": marker}
        cursor = self._queues.find(query, {"q": 1, "m": 1}).sort("q", 1).limit(limit)
        return [QueueInfo(d["q"], dict(json.loads(d["m"])) if detailed else None) for d in cursor]

    def count_queues(self, project: str) -> int:
        return int(self._queues.count_documents({"p": project}))

    def count_messages(self, project: str, most: int, now_ms: int) -> int:
        """Per queue the larger of its live messages and its live dedup records, as Redis
        counts (a record takes the store's space until the message first posted with its id
        would expire, deleted or not; a message and its own record count once): one
        aggregation of each collection on its expiry index's project prefix, each stopped
        after ``most`` documents."""
        messages = schema.live_per_queue(self._messages, project, most, now_ms)
        remembered = self._dedup_records.live_per_queue(project, most, now_ms)
        return sum(max(messages[q], remembered[q]) for q in messages.keys() | remembered.keys())

    def stats(self, project: str, queue: str, now_ms: int) -> QueueStats:
        scope = self._queue_filter(project, queue)
        alive = {**scope, "e": {"$gt": now_ms}}
        total = self._messages.count_documents(alive)
        claimed = self._messages.count_documents({**scope, "ce": {"$gt": now_ms}})
        not_claimable = self._messages.count_documents({**alive, "v": {"$gt": now_ms}})

        def end(direction: int) -> MessageRef | None:
            doc = self._messages.find_one(alive, {"cr": 1}, sort=[("k", direction)])
            return None if doc is None else MessageRef(doc["_id"], int(doc["cr"]))

        earliest = self._messages.find_one(
            {**alive, "v": {"$gt": now_ms}, "cid": None}, {"v": 1}, sort=[("v", 1), ("k", 1)]
        )
        return QueueStats(
            total=total,
            claimed=claimed,
            delayed=not_claimable - claimed,
            next_due_ms=None if earliest is None else int(earliest["v"]),
            # MongoDB's TTL monitor deletes expired messages without telling anyone.
            expired=0,
            oldest=end(1),
            newest=end(-1),
        )

    def purge(self, project: str, queue: str) -> None:
        scope = self._queue_filter(project, queue)
        self._messages.delete_many(scope)
        self._claims.delete_many(scope)
        self._dedup_records.forget_queue(project, queue)


def _created(now_ms: int) -> Doc:
    """The fields a queue's document gets when it is created, besides its names and
    metadata: its creation time and message sequence."""
    return {"cr": now_ms, "seq": 0}
