"""The storage contract of subscriptions: who is pushed a queue's messages.

Subscriptions are unique by project, queue and subscriber, live until their ttl runs out
(never returned afterwards, whatever the backend's own expiry), and go with their queue when
it is deleted. The contract suite's ``TestSubscriptions`` is the executable form.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from zaqar_delay.models import (
    NewSubscription,
    PushResult,
    Subscription,
    SubscriptionChange,
)

SUBSCRIBER_IN_USE = (
    "Such subscription already exists. Subscriptions are unique by project + queue + "
    "subscriber URI."
)
"""The Conflict's description when a change gives a subscription the subscriber of another
live one of its queue (Zaqar's words)."""


class SubscriptionStore(abc.ABC):
    """The subscriptions of every queue of a store."""

    @abc.abstractmethod
    def create_subscription(
        self, project: str, queue: str, new: NewSubscription, now_ms: int
    ) -> tuple[str, bool]:
        """Subscribe ``new.subscriber`` until ``now + new.ttl_s``, unconfirmed, creating the
        queue if needed; returns ``(id, True)``. When a live subscription of the queue already
        has this subscriber nothing changes and its ``(id, False)`` is returned."""

    @abc.abstractmethod
    def list_subscriptions(
        self, project: str, queue: str, marker: str | None, limit: int, now_ms: int
    ) -> list[Subscription]:
        """Up to ``limit`` live subscriptions with ids after ``marker``, in id order."""

    @abc.abstractmethod
    def get_subscription(
        self, project: str, queue: str, subscription_id: str, now_ms: int
    ) -> Subscription | None:
        """The live subscription, or None."""

    @abc.abstractmethod
    def update_subscription(
        self, project: str, queue: str, change: SubscriptionChange, now_ms: int
    ) -> None:
        """Replace the fields ``change`` sets; a new ttl starts at ``now_ms``.

        SubscriptionDoesNotExist when it is not live; Conflict (``SUBSCRIBER_IN_USE``) when
        another live subscription of the queue has the new subscriber (nothing is changed
        then).
        """

    @abc.abstractmethod
    def confirm_subscription(
        self, project: str, queue: str, subscription_id: str, confirmed: bool, now_ms: int
    ) -> None:
        """Set whether the subscriber confirmed it; SubscriptionDoesNotExist when not live."""

    @abc.abstractmethod
    def delete_subscription(self, project: str, queue: str, subscription_id: str) -> None:
        """Remove it; unknown ids are a no-op."""

    @abc.abstractmethod
    def record_push_results(
        self, project: str, queue: str, results: Sequence[tuple[str, PushResult]]
    ) -> None:
        """Keep each (subscription id, result) as that subscription's ``last_delivery``, in
        one store call; ids of subscriptions that are gone are skipped."""

    @abc.abstractmethod
    def purge_subscriptions(self, project: str, queue: str) -> None:
        """Remove every subscription of the queue, keeping the queue and its messages."""
