"""Subscriptions on Swift, in the subscriptions container:

- ``<p>/<q>/s/<id>``: the subscription (JSON), its expiry in the content type for listings;
- ``<p>/<q>/u/<sha1 of the subscriber>/<g>``: who holds a subscriber, as numbered generations
  created only if absent (``SwiftClient.create_settled``): of concurrent creations of one
  subscriber, one is kept. A generation holds while the subscription it names is live and
  still has that subscriber.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Sequence
from typing import Any

from zaqar_delay import errors
from zaqar_delay.models import (
    NewSubscription,
    PushResult,
    Subscription,
    SubscriptionChange,
)
from zaqar_delay.storage.subscriptions import SUBSCRIBER_IN_USE
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.common import Doc, SwiftBase

# Generations a creation tries while concurrent creations take them first.
HOLD_ATTEMPTS = 10


def subscription_of(subscription_id: str, queue: str, doc: Doc) -> Subscription:
    delivered = doc.get("ld")
    return Subscription(
        id=subscription_id,
        queue=queue,
        subscriber=doc["u"],
        ttl_s=int(doc["t"]),
        options=dict(doc["o"]),
        started_ms=int(doc["st"]),
        expires_ms=int(doc["e"]),
        confirmed=bool(doc["c"]),
        secret=doc["sk"],
        last_delivery=(
            PushResult(int(delivered["at"]), delivered["o"], delivered.get("d", ""))
            if delivered
            else None
        ),
    )


class SubscriptionOps(SwiftBase):
    """Create, list, read, change, confirm and delete subscriptions."""

    def _limits_changed(self, project: str, queue: str, subscription_id: str) -> None:
        """Its options changed: forget what its push limits keep (``PushOps``)."""

    def _subscription_gone(self, project: str, queue: str, subscription_id: str) -> None:
        """It was deleted: drop its parked pushes and limit state (``PushOps``)."""

    def _subscription_name(self, project: str, queue: str, subscription_id: str) -> str:
        return f"{names.queue_prefix(project, queue)}s/{subscription_id}"

    def _holders_prefix(self, project: str, queue: str, subscriber: str) -> str:
        digest = hashlib.sha1(subscriber.encode()).hexdigest()
        return f"{names.queue_prefix(project, queue)}u/{digest}/"

    def _read_subscription(self, project: str, queue: str, subscription_id: str) -> Doc | None:
        if not subscription_id.isalnum():
            return None
        # Every push's result overwrites its subscription: a read racing that may answer
        # 404, and a lease would drop the push, so a 404 is read again (``known``).
        found = self._swift.get(
            self._container(names.SUBSCRIPTIONS),
            self._subscription_name(project, queue, subscription_id),
            known=True,
        )
        return None if found is None else dict(json.loads(found[1]))

    def _write_subscription(self, project: str, queue: str, subscription_id: str, doc: Doc) -> None:
        self._swift.put(
            self._container(names.SUBSCRIPTIONS),
            self._subscription_name(project, queue, subscription_id),
            json.dumps(doc).encode(),
            names.content_type(e=doc["e"]),
        )

    def _hold_subscriber(
        self, project: str, queue: str, subscriber: str, subscription_id: str, now_ms: int
    ) -> str:
        """Make ``subscription_id`` the holder of ``subscriber``; returns the id of the live
        subscription that holds it instead ("" when this one does now)."""
        prefix = self._holders_prefix(project, queue, subscriber)
        container = self._container(names.SUBSCRIPTIONS)
        listed = self._swift.listing(container, prefix)
        generation = int(listed[-1]["name"].rsplit("/", 1)[1]) if listed else 0
        for _ in range(HOLD_ATTEMPTS):
            if generation:
                name = prefix + names.number_part(generation)
                sent = time.monotonic()
                found = self._swift.get(container, name, known=True)
                holder = "" if found is None else str(json.loads(found[1])["s"])
                if holder == subscription_id:
                    return ""
                doc = self._read_subscription(project, queue, holder) if holder else None
                if doc is not None and int(doc["e"]) > now_ms and doc["u"] == subscriber:
                    # What was read may be a concurrent creation's that another, not yet
                    # committed, still overwrites (its creator then deletes the subscription
                    # it named): the holder is the one kept once every such one is.
                    kept = self._swift.settled(container, name, sent)
                    if kept is not None and json.loads(kept)["s"] == holder:
                        return holder
                    continue
            held = json.dumps({"s": subscription_id, "k": secrets.token_hex(8)}).encode()
            name = prefix + names.number_part(generation + 1)
            if self._swift.create_settled(container, name, held, names.CONTENT_TYPE):
                return ""
            generation += 1  # a concurrent creation took it: see whom it names
        raise errors.StorageUnavailable("The subscription kept changing.")

    def create_subscription(
        self, project: str, queue: str, new: NewSubscription, now_ms: int
    ) -> tuple[str, bool]:
        self._ensure_queue(project, queue, now_ms)
        subscription_id = secrets.token_hex(12)
        doc = {
            "u": new.subscriber,
            "t": new.ttl_s,
            "o": new.options,
            "st": now_ms,
            "e": now_ms + new.ttl_s * 1000,
            "c": False,
            "sk": new.secret,
        }
        # Posts look for subscriptions once the queue is marked: marked before the
        # subscription is written, and checked again after, since a metadata write in
        # between may have undone the mark (``set_metadata``).
        self._mark_subscribed(project, queue)
        # Written before it holds the new.subscriber, so whoever reads the holder finds it.
        self._write_subscription(project, queue, subscription_id, doc)
        holder = self._hold_subscriber(project, queue, new.subscriber, subscription_id, now_ms)
        if holder:
            self._swift.delete(
                self._container(names.SUBSCRIPTIONS),
                self._subscription_name(project, queue, subscription_id),
            )
            return holder, False
        if not self._marked_subscribed(project, queue):
            self._mark_subscribed(project, queue)
        self._queue_object_written(project, queue)  # posts now look for it
        return subscription_id, True

    def list_subscriptions(
        self, project: str, queue: str, marker: str | None, limit: int, now_ms: int
    ) -> list[Subscription]:
        prefix = f"{names.queue_prefix(project, queue)}s/"
        start = prefix + marker if marker else ""
        live: list[str] = []
        for entry in self._swift.walk(self._container(names.SUBSCRIPTIONS), prefix, marker=start):
            if int(names.fields_of(entry["content_type"])["e"]) > now_ms:
                live.append(entry["name"][len(prefix) :])
                if len(live) == limit:
                    break
        docs = self._swift.each(lambda s: self._read_subscription(project, queue, s), live)
        return [
            subscription_of(s, queue, doc)
            for s, doc in zip(live, docs, strict=True)
            if doc is not None and int(doc["e"]) > now_ms
        ]

    def get_subscription(
        self, project: str, queue: str, subscription_id: str, now_ms: int
    ) -> Subscription | None:
        doc = self._read_subscription(project, queue, subscription_id)
        if doc is None or int(doc["e"]) <= now_ms:
            return None
        return subscription_of(subscription_id, queue, doc)

    def _live_subscription(
        self, project: str, queue: str, subscription_id: str, now_ms: int
    ) -> Doc:
        doc = self._read_subscription(project, queue, subscription_id)
        if doc is None or int(doc["e"]) <= now_ms:
            raise errors.SubscriptionDoesNotExist(subscription_id, queue, project)
        return doc

    def update_subscription(
        self, project: str, queue: str, change: SubscriptionChange, now_ms: int
    ) -> None:
        subscription_id = change.subscription_id
        doc = self._live_subscription(project, queue, subscription_id, now_ms)
        if change.subscriber is not None and change.subscriber != doc["u"]:
            holder = self._hold_subscriber(
                project, queue, change.subscriber, subscription_id, now_ms
            )
            if holder:
                raise errors.Conflict(SUBSCRIBER_IN_USE)
            doc["u"] = change.subscriber
        if change.ttl_s is not None:
            doc.update(t=change.ttl_s, st=now_ms, e=now_ms + change.ttl_s * 1000)
        if change.options is not None:
            doc["o"] = change.options
        self._write_subscription(project, queue, subscription_id, doc)
        if change.options is not None:
            self._limits_changed(project, queue, subscription_id)

    def confirm_subscription(
        self, project: str, queue: str, subscription_id: str, confirmed: bool, now_ms: int
    ) -> None:
        doc = self._live_subscription(project, queue, subscription_id, now_ms)
        self._write_subscription(project, queue, subscription_id, {**doc, "c": confirmed})

    def record_push_results(
        self, project: str, queue: str, results: Sequence[tuple[str, PushResult]]
    ) -> None:
        def record(item: tuple[str, PushResult]) -> None:
            subscription_id, result = item
            doc = self._read_subscription(project, queue, subscription_id)
            if doc is not None:
                delivered: dict[str, Any] = {"at": result.at_ms, "o": result.outcome}
                if result.detail:
                    delivered["d"] = result.detail
                self._write_subscription(project, queue, subscription_id, {**doc, "ld": delivered})

        self._swift.each(record, results)

    def delete_subscription(self, project: str, queue: str, subscription_id: str) -> None:
        if not subscription_id.isalnum():
            return
        self._swift.delete(
            self._container(names.SUBSCRIPTIONS),
            self._subscription_name(project, queue, subscription_id),
        )
        self._subscription_gone(project, queue, subscription_id)

    def purge_subscriptions(self, project: str, queue: str) -> None:
        self._swift.delete_all(
            self._container(names.SUBSCRIPTIONS), names.queue_prefix(project, queue)
        )
        self._subscriptions_purged(project, queue)

    def _subscriptions_purged(self, project: str, queue: str) -> None:
        """Every subscription of the queue is gone: drop its pushes (``PushOps``)."""
