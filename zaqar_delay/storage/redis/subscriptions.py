"""Subscriptions on Redis: one script call per operation (``lua/subscription.lua``), in the
queue's own cluster slot."""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgpack

from zaqar_delay import errors
from zaqar_delay.models import (
    NewSubscription,
    PushResult,
    Subscription,
    SubscriptionChange,
)
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.redis.errors import translate_class_errors
from zaqar_delay.storage.redis.keys import KeySpace
from zaqar_delay.storage.redis.replies import text
from zaqar_delay.storage.subscriptions import SUBSCRIBER_IN_USE

NOT_LIVE, SUBSCRIBER_TAKEN = -1, -2


def subscription_of(subscription_id: str, queue: str, raw: bytes) -> Subscription:
    """A subscription from its stored record (the S_* positions in ``lua/lib.lua``)."""
    fields = msgpack.unpackb(raw)
    subscriber, ttl, started, expires, confirmed, options, secret = fields[:7]
    last = None
    if len(fields) > 7:  # S_LAST: the last push attempt, once there was one
        at_ms, outcome, detail = fields[7]
        last = PushResult(int(at_ms), text(outcome), text(detail))
    return Subscription(
        id=subscription_id,
        queue=queue,
        subscriber=text(subscriber),
        ttl_s=int(ttl),
        options=dict(json.loads(options)),
        started_ms=int(started),
        expires_ms=int(expires),
        confirmed=bool(confirmed),
        secret=text(secret),
        last_delivery=last,
    )


@translate_class_errors
class SubscriptionScripts(Driver):
    """The subscription operations of :class:`~zaqar_delay.storage.redis.driver.RedisDriver`."""

    if TYPE_CHECKING:
        _client: Any
        _keys: KeySpace

        def _run(self, name: str, project: str, queue: str, *args: Any) -> Any: ...

        def _index_queue(self, project: str, *queues: str) -> None: ...

        def _lower_push_index(self, project: str, queue: str, due_ms: int) -> None: ...

    def create_subscription(
        self, project: str, queue: str, new: NewSubscription, now_ms: int
    ) -> tuple[str, bool]:
        new_id = secrets.token_hex(12)
        created, subscription_id, queue_created = self._run(
            "subscription",
            project,
            queue,
            "create",
            now_ms,
            new_id,
            new.subscriber,
            new.ttl_s,
            json.dumps(new.options),
            new.secret,
        )
        if queue_created:
            self._index_queue(project, queue)
        return subscription_id.decode(), bool(created)

    def list_subscriptions(
        self, project: str, queue: str, marker: str | None, limit: int, now_ms: int
    ) -> list[Subscription]:
        flat = self._run("subscription", project, queue, "list", now_ms, marker or "", limit)
        return [
            subscription_of(flat[i].decode(), queue, flat[i + 1]) for i in range(0, len(flat), 2)
        ]

    def get_subscription(
        self, project: str, queue: str, subscription_id: str, now_ms: int
    ) -> Subscription | None:
        raw = self._client.hget(self._keys.queue(project, queue).subscriptions, subscription_id)
        if raw is None:
            return None
        found = subscription_of(subscription_id, queue, raw)
        return found if found.expires_ms > now_ms else None

    def update_subscription(
        self, project: str, queue: str, change: SubscriptionChange, now_ms: int
    ) -> None:
        subscription_id = change.subscription_id
        options = "" if change.options is None else json.dumps(change.options)
        self._check(
            self._run(
                "subscription",
                project,
                queue,
                "update",
                now_ms,
                subscription_id,
                change.subscriber or "",
                change.ttl_s or 0,
                options,
            ),
            project,
            queue,
            subscription_id,
        )
        if change.options is not None:
            # Pushes its old dispatch limits held back are owed now (subscription.lua).
            self._lower_push_index(project, queue, now_ms)

    def confirm_subscription(
        self, project: str, queue: str, subscription_id: str, confirmed: bool, now_ms: int
    ) -> None:
        reply = self._run(
            "subscription", project, queue, "confirm", now_ms, subscription_id, int(confirmed)
        )
        self._check(reply, project, queue, subscription_id)

    def delete_subscription(self, project: str, queue: str, subscription_id: str) -> None:
        self._run("subscription", project, queue, "delete", 0, subscription_id)

    def purge_subscriptions(self, project: str, queue: str) -> None:
        self._run("subscription", project, queue, "purge", 0)

    def record_push_results(
        self, project: str, queue: str, results: Sequence[tuple[str, PushResult]]
    ) -> None:
        if not results:
            return
        flat: list[Any] = []
        for subscription_id, result in results:
            flat += [subscription_id, result.at_ms, result.outcome, result.detail]
        self._run("subscription", project, queue, "results", 0, *flat)

    @staticmethod
    def _check(reply: int, project: str, queue: str, subscription_id: str) -> None:
        if reply == NOT_LIVE:
            raise errors.SubscriptionDoesNotExist(subscription_id, queue, project)
        if reply == SUBSCRIBER_TAKEN:
            raise errors.Conflict(SUBSCRIBER_IN_USE)
