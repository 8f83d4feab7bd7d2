"""What the parts of the MongoDB driver share: document helpers, collections, constants.

The driver is assembled from :class:`~zaqar_delay.storage.mongodb.queues.QueueOps`,
:class:`~zaqar_delay.storage.mongodb.messages.MessageOps` and
:class:`~zaqar_delay.storage.mongodb.claims.ClaimOps` on top of :class:`MongoBase`, which holds
the collections they all use. Each part translates errors once, as a class
(:func:`~zaqar_delay.storage.mongodb.errors.translate_class_errors`).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pymongo
from pymongo import ReturnDocument
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

from zaqar_delay import errors
from zaqar_delay.models import Message
from zaqar_delay.policy import QueuePolicy
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.dedup_reservation import DedupReservation
from zaqar_delay.storage.mongodb.dedup import MongoDedupRecords
from zaqar_delay.storage.mongodb.wakeups import MongoWakeups

Doc = dict[str, Any]

# Fields a listing scan reads before it fetches the bodies of the messages it keeps.
SCAN_FIELDS = {"k": 1, "e": 1, "u": 1, "ce": 1, "d": 1}


def claimable_filter(scope: Doc, now_ms: int) -> Doc:
    """Due or whose claim ran out (``v <= now``), and unexpired."""
    return {**scope, "v": {"$lte": now_ms}, "e": {"$gt": now_ms}}


def redelivery(policy: QueuePolicy, base: int | str) -> list[Doc]:
    """Update pipeline for messages leaving their claim at ``base`` (ms, or a field path).

    They keep their original due time (and place in line) unless the queue has a
    ``_retry_backoff`` policy: then they are due at base + min(max, initial * factor ^
    (claim_count - 1)) seconds, exactly as the Redis driver computes it.
    """
    backoff = policy.retry_backoff
    due: Any = "$d"
    if backoff is not None:
        initial, factor, maximum = backoff.initial_s, backoff.factor, backoff.max_s
        exponent = {"$max": [{"$subtract": ["$cc", 1]}, 0]}
        seconds = {"$min": [maximum, {"$multiply": [initial, {"$pow": [factor, exponent]}]}]}
        due = {"$toLong": {"$add": [base, {"$multiply": [1000, seconds]}]}}
    return [{"$set": {"d": due}}, {"$set": {"v": "$d", "cid": None, "ce": 0}}]


def message_of(doc: Doc, now_ms: int) -> Message:
    live = doc["cid"] is not None and doc["ce"] > now_ms
    return Message(
        id=doc["_id"],
        body=json.loads(doc["b"]),
        ttl_s=int(doc["t"]),
        created_ms=int(doc["cr"]),
        expires_ms=int(doc["e"]),
        due_ms=int(doc["d"]),
        claim_id=doc["cid"] if live else None,
        claim_count=int(doc["cc"]),
        client_id=doc["u"],
        hops=int(doc.get("h", 0)),
    )


class MongoBase(Driver):
    """The collections and helpers every part of the driver uses."""

    _client: pymongo.MongoClient[Doc]
    _db: Database[Doc]
    _queues: Collection[Doc]
    _messages: Collection[Doc]
    _claims: Collection[Doc]
    _subscriptions: Collection[Doc]
    _pushes: Collection[Doc]
    _push_limits: Collection[Doc]
    _dedup_records: MongoDedupRecords
    _dedup: DedupReservation
    _closed: threading.Event
    _wakeups: MongoWakeups
    _unreliable: bool
    _list_scan_budget: int

    def _queue_filter(self, project: str, queue: str) -> Doc:
        return {"p": project, "q": queue}

    def _reserve_sequence(self, project: str, queue: str, count: int, now_ms: int) -> int:
        """Take ``count`` sequence numbers (creating the queue if needed); returns the first."""
        return self._reserve(project, queue, count, now_ms)[0]

    def _reserve(self, project: str, queue: str, count: int, now_ms: int) -> tuple[int, bool]:
        """:meth:`_reserve_sequence`, and whether the queue ever had a subscription (``hs``,
        so that posts to other queues look for none; a queue's first post also looks for
        subscriptions its document does not know of)."""
        for _ in range(3):
            try:
                updated = self._queues.find_one_and_update(
                    self._queue_filter(project, queue),
                    {"$inc": {"seq": count}, "$setOnInsert": {"m": "{}", "cr": now_ms}},
                    upsert=True,
                    return_document=ReturnDocument.AFTER,
                )
            except DuplicateKeyError:
                continue  # a concurrent post created the queue first; the retry updates it
            # MongoDB returns the upserted document; secantusdb has answered None when a
            # concurrent upsert created it first. Either way the retry updates it.
            if updated is not None:
                first = int(updated["seq"]) - count + 1
                subscribed = bool(updated.get("hs"))
                if not subscribed and first == 1:
                    subscribed = self._adopt_subscriptions(project, queue)
                return first, subscribed
        raise errors.StorageUnavailable("The queue could not be created.")

    def _adopt_subscriptions(self, project: str, queue: str) -> bool:
        """Whether the queue, at its first post, has subscriptions its document does not
        know of (marked ``hs`` then): those a creation stored while a deletion of the queue
        removed the document it had marked."""
        scope = self._queue_filter(project, queue)
        if self._subscriptions.find_one(scope, {"_id": 1}) is None:
            return False
        self._queues.update_one(scope, {"$set": {"hs": True}})
        return True

    def _policy(self, project: str, queue: str) -> QueuePolicy:
        return QueuePolicy.of(self.get_metadata(project, queue) or {})

    def _return_lapsed_claims(self, scope: Doc, policy: QueuePolicy, now_ms: int) -> None:
        """Messages whose claim ran out become claimable again (see ``redelivery``)."""
        self._messages.update_many(
            {**scope, "ce": {"$gt": 0, "$lte": now_ms}}, redelivery(policy, "$ce")
        )

    def _live_claim(self, project: str, queue: str, claim_id: str, now_ms: int) -> Doc | None:
        return self._claims.find_one(
            {**self._queue_filter(project, queue), "_id": claim_id, "e": {"$gt": now_ms}}
        )
