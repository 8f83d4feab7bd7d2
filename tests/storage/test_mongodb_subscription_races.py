"""MongoDB subscriptions made while another of the same subscriber, or their queue, goes away."""

from __future__ import annotations

from typing import Any

import pytest

from zaqar_delay.clock import FakeClock
from zaqar_delay.models import LeaseRequest, NewMessage, NewSubscription
from zaqar_delay.storage.mongodb.driver import MongoDriver

P, Q = "p", "q"
SUBSCRIBER = "http://127.0.0.1:9/hook"
ALICE = "a" * 32


def test_a_subscription_refused_for_one_deleted_meanwhile_is_made(
    mongo: MongoDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unique index refuses the new subscription for the subscriber's existing one,
    which a concurrent DELETE removes before the creation reads it. Before, the creation
    answered 503 ("kept changing"); now it inserts again and is made."""
    clock = FakeClock()
    first, _ = mongo.create_subscription(
        P, Q, NewSubscription(SUBSCRIBER, 3600, {}, "s1"), clock.now_ms()
    )
    find_one = mongo._subscriptions.find_one
    deleted: list[str] = []

    def deleted_before_it_is_read(*args: Any, **kwargs: Any) -> Any:
        if not deleted:
            deleted.append(first)
            mongo.delete_subscription(P, Q, first)
        return find_one(*args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(mongo._subscriptions, "find_one", deleted_before_it_is_read)
        made, created = mongo.create_subscription(
            P, Q, NewSubscription(SUBSCRIBER, 3600, {}, "s2"), clock.now_ms()
        )

    assert deleted == [first], "the creation was not refused for the existing subscription"
    assert created and made != first
    listed = mongo.list_subscriptions(P, Q, None, 10, clock.now_ms())
    assert [(s.id, s.subscriber) for s in listed] == [(made, SUBSCRIBER)]


def test_a_subscription_made_while_its_queue_is_deleted_is_pushed_to(
    mongo: MongoDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The creation marks the queue's document as subscribed, then a deletion of the queue
    removes its subscriptions and its document, then the subscription is stored: it outlives
    the document that knew of it. Before, posts to the queue made again looked for no
    subscription, and the subscription, listed, was never pushed to."""
    clock = FakeClock()
    insert_one = mongo._subscriptions.insert_one

    def deleted_before_it_is_stored(*args: Any, **kwargs: Any) -> Any:
        mongo.delete_queue(P, Q)
        return insert_one(*args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(mongo._subscriptions, "insert_one", deleted_before_it_is_stored)
        made, created = mongo.create_subscription(
            P, Q, NewSubscription(SUBSCRIBER, 3600, {}, "s"), clock.now_ms()
        )
    assert created
    assert mongo._queues.count_documents({"p": P, "q": Q}) == 0, "the queue was not deleted"
    assert [s.id for s in mongo.list_subscriptions(P, Q, None, 10, clock.now_ms())] == [made]

    posted = mongo.post_messages(P, Q, [NewMessage('"hello"', 3600, 0)], ALICE, clock.now_ms())

    leased = mongo.lease_pushes(P, Q, LeaseRequest(clock.now_ms(), 30_000, 10))
    assert [(d.message.id, d.subscription.id) for d in leased] == [(posted.ids[0], made)]
