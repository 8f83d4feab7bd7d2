"""Posting positions on MongoDB: a message's place in its queue's order (``k``, unique per
queue), taken from the queue document's counter (``seq``).

A position can be held by a message the counter no longer knows of. A queue deleted while a
post is storing keeps that post's messages when they are inserted after the deletion removed
the queue's messages and before it removed the queue's document. The queue made again (by a
post, a PUT or a dead-letter move) counts from the start, and reaches their positions. A
write refused for a position that another message holds is therefore given positions past
every message the queue holds, and sent again, rather than refused (before: the post answered
503; dead letters copied to such a queue were taken for copies an earlier attempt had stored,
and deleted from their queue unstored).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pymongo

from zaqar_delay import errors
from zaqar_delay.storage.mongodb.common import Doc, MongoBase
from zaqar_delay.storage.mongodb.errors import duplicate_positions

#: Times a write is given new positions before it is refused (each time past every message
#: the queue holds: only writes racing it take them again).
PLACING_ATTEMPTS = 3

#: A write that places messages: a document to insert, or a filter and the fields to set.
W = TypeVar("W")


class Positions(MongoBase):
    """Writes that place messages in a queue, whatever positions other messages hold."""

    def _positions_past_held(self, project: str, queue: str, count: int, now_ms: int) -> int:
        """The first of ``count`` new positions of the queue, past every message it holds
        (its counter moved past the last one first; creating the queue if needed)."""
        scope = self._queue_filter(project, queue)
        last = self._messages.find_one(scope, {"k": 1}, sort=[("k", pymongo.DESCENDING)])
        if last is not None:
            self._queues.update_one(scope, {"$max": {"seq": int(last["k"])}})
        return self._reserve_sequence(project, queue, count, now_ms)

    def _insert_placed(self, project: str, queue: str, documents: list[Doc], now_ms: int) -> None:
        """Insert the messages ``documents`` into the queue, unordered. A document whose id
        is stored already (an earlier attempt of the same write) is left as it is; one whose
        position another message holds is inserted again past every message the queue holds
        (its ``k`` changed in place). StorageUnavailable when a fence (``dedup.fence``) holds
        one of their ids, the others stored, for the caller to undo."""
        self._placed(project, queue, documents, self._insert_unordered, lambda d: d, now_ms)

    def _update_placed(
        self, project: str, queue: str, updates: list[tuple[Doc, Doc]], now_ms: int
    ) -> None:
        """Apply ``updates`` (a filter, and the fields it sets, among them a position ``k``
        in the queue), unordered; one refused because another message holds its position is
        applied again past every message the queue holds."""
        self._placed(project, queue, updates, self._update_unordered, lambda u: u[1], now_ms)

    def _placed(
        self,
        project: str,
        queue: str,
        pending: list[W],
        write: Callable[[list[W]], list[W]],
        fields_of: Callable[[W], Doc],
        now_ms: int,
    ) -> None:
        """Send the writes ``pending`` (``write`` answers those refused for a held position),
        and those refused again with new positions, ``PLACING_ATTEMPTS`` times at most."""
        for _ in range(PLACING_ATTEMPTS):
            pending = write(pending)
            if not pending:
                return
            first = self._positions_past_held(project, queue, len(pending), now_ms)
            for i, placed in enumerate(pending):
                fields_of(placed)["k"] = first + i
        raise errors.StorageUnavailable(f"The positions of queue {queue} kept being taken.")

    def _update_unordered(self, updates: list[tuple[Doc, Doc]]) -> list[tuple[Doc, Doc]]:
        """Apply ``updates``, unordered; those refused because another message holds their
        position."""
        requests = [pymongo.UpdateOne(match, {"$set": fields}) for match, fields in updates]
        try:
            self._messages.bulk_write(requests, ordered=False)
            return []
        except pymongo.errors.BulkWriteError as exc:
            refused = duplicate_positions(exc)
            if refused is None:
                raise
        return [updates[i] for i in refused]

    def _insert_unordered(self, documents: list[Doc]) -> list[Doc]:
        """Insert ``documents``, unordered; those refused because another message holds
        their position."""
        try:
            self._messages.insert_many(documents, ordered=False)
            return []
        except pymongo.errors.BulkWriteError as exc:
            refused = duplicate_positions(exc)
            if refused is None:
                raise
        ids = [documents[i]["_id"] for i in refused]
        found = {d["_id"]: d["e"] for d in self._messages.find({"_id": {"$in": ids}}, {"e": 1})}
        if any(expires == 0 for expires in found.values()):
            # A fence: a repeat of this post took its dedup id over.
            raise errors.StorageUnavailable(
                "MongoDB refused part of the post's messages: a repeat of the post took a "
                "dedup id of it over while it stalled. Nothing of it is stored; post again to "
                "learn the message's id."
            )
        return [documents[i] for i in refused if documents[i]["_id"] not in found]
