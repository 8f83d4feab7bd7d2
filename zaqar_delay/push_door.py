"""The push dispatcher's door to the stores: it never holds a store itself, and every message a
push consumes or dead-letters is journaled and counted as any other delete or post."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from zaqar_delay import jsondoc, push_hops
from zaqar_delay.encryption import QueueEncryption
from zaqar_delay.errors import StorageUnavailable
from zaqar_delay.lifecycle import Lifecycle
from zaqar_delay.models import Delivery, LeaseRequest, NewMessage, PushResult, Settlement
from zaqar_delay.policy import QueuePolicy
from zaqar_delay.posting import MessagePoster
from zaqar_delay.storage.base import Driver
from zaqar_delay.stores import Stores

LOG = logging.getLogger(__name__)
T = TypeVar("T")

# The Client-ID of the messages the push dispatcher dead-letters.
DEAD_LETTER_CLIENT_ID = "zaqar-delay-push"


class PushDoor:
    """What the dispatcher asks of the stores, through the service's own parts."""

    def __init__(
        self,
        stores: Stores,
        lifecycle: Lifecycle,
        encryption: QueueEncryption,
        poster: MessagePoster,
    ) -> None:
        self.stores = stores
        self.lifecycle = lifecycle
        self.encryption = encryption
        self.poster = poster

    def next_push_ms(self) -> int | None:
        """The earliest time a push is owed on any store that answers (None: none is
        owed)."""
        owed = [ms for ms in self._ask_each(lambda store: store.next_push_ms()) if ms is not None]
        return min(owed, default=None)

    def due_push_queues(self, until_ms: int, limit: int) -> list[tuple[str, str]]:
        """(project, queue) of queues owing pushes by ``until_ms``, up to ``limit`` per store
        that answers, each store's oldest first."""
        return [
            queue
            for queues in self._ask_each(lambda store: store.due_push_queues(until_ms, limit))
            for queue in queues
        ]

    def _ask_each(self, question: Callable[[Driver], T]) -> list[T]:
        """Each store's answer to ``question``, less those of stores that do not answer:
        one pool away must not stop the pushes of the others (it is left out of the rounds a
        while, ``silent_pools.py``). StorageUnavailable when no store answers."""
        answers: list[T] = []
        refused: dict[str, StorageUnavailable] = {}
        for name, store in self.stores.named():
            try:
                answers.append(question(store))
            except StorageUnavailable as exc:
                refused[name] = exc
                self.stores.did_not_answer(name)
        if refused and not answers:
            raise next(iter(refused.values()))  # the dispatcher waits for the store
        for name, failure in refused.items():
            LOG.warning("pushes owed on store %s wait: %s", name, failure.description)
        return answers

    def settle_pushes(self, project: str, queue: str, settlement: Settlement, now_ms: int) -> None:
        """Record attempts made under their lease (``Driver.settle_pushes``). The messages
        the ``settlement.consume`` deliveries deleted (a queue with ``_delete_after_push``) are
        reported as deleted, as a consumer's delete is."""
        store = self.stores.for_queue(project, queue)
        consumed = store.settle_pushes(project, queue, settlement, now_ms)
        if consumed:
            self.lifecycle.deleted(project, queue, consumed, consumed, None, now_ms)

    def record_push_results(
        self, project: str, queue: str, results: Sequence[tuple[str, PushResult]]
    ) -> None:
        """Keep each subscription's last attempt for its readers (``last_delivery``)."""
        self.stores.for_queue(project, queue).record_push_results(project, queue, results)

    def delete_subscription(self, project: str, queue: str, subscription_id: str) -> None:
        """End a subscription whose subscriber is gone for good (a WebSocket session that
        ended); the pushes owed to it go with it. None of them is a trust's (only the
        server subscribes a session)."""
        self.stores.for_queue(project, queue).delete_subscription(project, queue, subscription_id)

    def lease_pushes(
        self, project: str, queue: str, now_ms: int, lease_ms: int, limit: int, until_ms: int
    ) -> list[Delivery]:
        """Lease up to ``limit`` pushes of a queue owed by ``until_ms`` for one attempt each
        (``Driver.lease_pushes``), their messages as subscribers are sent them: bodies of
        encrypted queues opened."""
        request = LeaseRequest(now_ms, lease_ms, limit, until_ms)
        leased = self.stores.for_queue(project, queue).lease_pushes(project, queue, request)
        return self.encryption.open_deliveries(leased)

    def dead_letter_push(
        self, delivery: Delivery, target: str, document: Mapping[str, Any], now_ms: int
    ) -> None:
        """Post ``document`` (a push that failed for good) to the queue ``target``, once: the
        delivery id is its dedup id, so a crash that repeats this posts nothing more. Sealed
        when ``target`` encrypts its messages or the push's own queue does; journaled,
        counted and pushed on as any post."""
        message = NewMessage(
            jsondoc.dumps(document),
            delivery.message.ttl_s,
            0,
            f"push:{delivery.id}",
            # Made by the push (its posts would have carried as many), so a chain of
            # forwarding subscriptions and dead-letter queues ends too.
            hops=push_hops.onward(delivery.message.hops),
        )
        source = QueuePolicy.of(delivery.queue_metadata)
        # As a claim's dead letters: on the queue's pool when ``target`` is placed nowhere.
        self.stores.colocate(delivery.project, delivery.queue, target)
        posted, built = self.poster.post_built(
            delivery.project,
            target,
            [message],
            DEAD_LETTER_CLIENT_ID,
            now_ms,
            seal=source.encrypt_messages,
        )
        self.lifecycle.posted(delivery.project, target, posted, built, now_ms)
