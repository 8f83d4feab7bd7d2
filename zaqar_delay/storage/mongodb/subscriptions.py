"""Subscriptions on MongoDB: the ``subscriptions`` collection, one document each, unique by
project, queue and subscriber (a unique index settles concurrent creations)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence

from pymongo import UpdateOne
from pymongo.errors import DuplicateKeyError

from zaqar_delay import errors
from zaqar_delay.models import (
    NewSubscription,
    PushResult,
    Subscription,
    SubscriptionChange,
)
from zaqar_delay.storage.mongodb.common import Doc
from zaqar_delay.storage.mongodb.errors import translate_class_errors
from zaqar_delay.storage.mongodb.push_limits import PushLimitOps
from zaqar_delay.storage.mongodb.schema import as_date
from zaqar_delay.storage.subscriptions import SUBSCRIBER_IN_USE


def subscription_of(doc: Doc) -> Subscription:
    return Subscription(
        id=doc["_id"],
        queue=doc["q"],
        subscriber=doc["u"],
        ttl_s=int(doc["t"]),
        options=dict(json.loads(doc["o"])),
        started_ms=int(doc["st"]),
        expires_ms=int(doc["e"]),
        confirmed=bool(doc["c"]),
        secret=doc["sk"],
        last_delivery=_result_of(doc.get("ld")),
    )


def _result_of(stored: Doc | None) -> PushResult | None:
    """``ld``: the last push attempt, {"at": sent ms, "o": outcome, "d": detail}."""
    if not stored:
        return None
    return PushResult(int(stored["at"]), stored["o"], stored.get("d", ""))


#: Times a subscription is inserted again when the one that refused it is gone meanwhile.
CREATE_ATTEMPTS = 3


@translate_class_errors
class SubscriptionOps(PushLimitOps):
    """Create, list, read, change, confirm and delete subscriptions."""

    def _live(self, project: str, queue: str, now_ms: int) -> Doc:
        return {**self._queue_filter(project, queue), "e": {"$gt": now_ms}}

    def _forget_lapsed(self, project: str, queue: str, subscriber: str, now_ms: int) -> None:
        """An expired subscription the TTL monitor has not removed yet must not hold its
        subscriber in the unique index."""
        self._subscriptions.delete_many(
            {**self._queue_filter(project, queue), "u": subscriber, "e": {"$lte": now_ms}}
        )

    def create_subscription(
        self, project: str, queue: str, new: NewSubscription, now_ms: int
    ) -> tuple[str, bool]:
        self.create_queue(project, queue, {}, now_ms)  # no-op when it exists
        # Posts to this queue look for subscriptions from now on (see MongoBase._reserve).
        self._queues.update_one(self._queue_filter(project, queue), {"$set": {"hs": True}})
        expires_ms = now_ms + new.ttl_s * 1000
        subscription_id = secrets.token_hex(12)
        document = {
            **self._queue_filter(project, queue),
            "_id": subscription_id,
            "u": new.subscriber,
            "t": new.ttl_s,
            "o": json.dumps(new.options),
            "st": now_ms,
            "e": expires_ms,
            "ex": as_date(expires_ms),
            "c": False,
            "sk": new.secret,
        }
        for _ in range(CREATE_ATTEMPTS):
            self._forget_lapsed(project, queue, new.subscriber, now_ms)
            try:
                self._subscriptions.insert_one(dict(document))
            except DuplicateKeyError:
                existing = self._subscriptions.find_one(
                    {**self._live(project, queue, now_ms), "u": new.subscriber}, {"_id": 1}
                )
                if existing is not None:
                    return str(existing["_id"]), False
                continue  # the subscription that refused it was deleted (or expired) meanwhile
            # Marked again: a deletion of the queue may have removed the document marked
            # above, and a post made it again since (a later first post finds it itself).
            self._queues.update_one(self._queue_filter(project, queue), {"$set": {"hs": True}})
            return subscription_id, True
        raise errors.StorageUnavailable("The subscription kept changing")

    def list_subscriptions(
        self, project: str, queue: str, marker: str | None, limit: int, now_ms: int
    ) -> list[Subscription]:
        query = self._live(project, queue, now_ms)
        if marker:
            query["_id"] = {"$gt": marker}
        found = self._subscriptions.find(query).sort("_id", 1).limit(limit)
        return [subscription_of(doc) for doc in found]

    def get_subscription(
        self, project: str, queue: str, subscription_id: str, now_ms: int
    ) -> Subscription | None:
        doc = self._subscriptions.find_one(
            {**self._live(project, queue, now_ms), "_id": subscription_id}
        )
        return None if doc is None else subscription_of(doc)

    def update_subscription(
        self, project: str, queue: str, change: SubscriptionChange, now_ms: int
    ) -> None:
        subscription_id = change.subscription_id
        fields: Doc = {}
        if change.subscriber is not None:
            fields["u"] = change.subscriber
            self._forget_lapsed(project, queue, change.subscriber, now_ms)
        if change.ttl_s is not None:
            expires_ms = now_ms + change.ttl_s * 1000
            fields.update(t=change.ttl_s, st=now_ms, e=expires_ms, ex=as_date(expires_ms))
        if change.options is not None:
            fields["o"] = json.dumps(change.options)
        self._set(project, queue, subscription_id, fields, now_ms)
        if change.options is not None:
            self._unpark_all(subscription_id)

    def confirm_subscription(
        self, project: str, queue: str, subscription_id: str, confirmed: bool, now_ms: int
    ) -> None:
        self._set(project, queue, subscription_id, {"c": confirmed}, now_ms)

    def _set(
        self, project: str, queue: str, subscription_id: str, fields: Doc, now_ms: int
    ) -> None:
        query = {**self._live(project, queue, now_ms), "_id": subscription_id}
        try:
            matched = self._subscriptions.update_one(query, {"$set": fields}).matched_count
        except DuplicateKeyError:
            raise errors.Conflict(SUBSCRIBER_IN_USE) from None
        if not matched:
            raise errors.SubscriptionDoesNotExist(subscription_id, queue, project)

    def record_push_results(
        self, project: str, queue: str, results: Sequence[tuple[str, PushResult]]
    ) -> None:
        if not results:
            return
        where = self._queue_filter(project, queue)
        self._subscriptions.bulk_write(
            [
                UpdateOne(
                    {**where, "_id": subscription_id},
                    {"$set": {"ld": {"at": r.at_ms, "o": r.outcome, "d": r.detail}}},
                )
                for subscription_id, r in results
            ],
            ordered=False,
        )

    def delete_subscription(self, project: str, queue: str, subscription_id: str) -> None:
        self._subscriptions.delete_one(
            {**self._queue_filter(project, queue), "_id": subscription_id}
        )
        self._drop_parked(subscription_id)

    def purge_subscriptions(self, project: str, queue: str) -> None:
        self._subscriptions.delete_many(self._queue_filter(project, queue))
        self._drop_queue_limits(self._queue_filter(project, queue))
