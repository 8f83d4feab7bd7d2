"""Concurrent creations on Swift (``MemorySwift.creation_window``): an object server checks
that an object is absent before it receives the data, so two create-only writes of one name
can both pass the check and both succeed, the later one kept. A creator learns which one Swift
keeps only by reading the object back once every such creation is committed
(``SwiftClient.settled``)."""

from __future__ import annotations

import collections
import dataclasses
import uuid
from collections.abc import Callable
from typing import TypeVar

import pytest

from testbed.swift_aio import SwiftAllInOne
from tests.helpers.memory_swift import Process, TakingTurns, memory_client
from tests.helpers.stores import RACING_SETTLE_MS
from tests.helpers.swift import CreationsSeen, create_queue_at_once
from zaqar_delay.models import ClaimTimes, NewMessage, NewSubscription
from zaqar_delay.storage.push_leasing import LeaseRequest
from zaqar_delay.storage.swift import connect, names
from zaqar_delay.storage.swift.access import access_from_uri
from zaqar_delay.storage.swift.driver import SwiftDriver

T = TypeVar("T")
P, Q = "p", "q"
NOW_MS = 1_800_000_000_000
METADATA = {"_default_message_delay": 10}


def _drivers(swift: TakingTurns, processes: str) -> list[SwiftDriver]:
    """A driver for each process named (one letter each), on one prepared namespace."""
    namespace = f"zd{uuid.uuid4().hex[:12]}"
    drivers = [
        SwiftDriver(memory_client(swift, Process(n)), namespace=namespace) for n in processes
    ]
    drivers[0].prepare()
    return drivers


def _kinds(swift: TakingTurns) -> list[str]:
    """The kinds of objects (``names.CLAIMS``...) a creation stored over another's of."""
    return [container.rsplit("_", 1)[1] for container, _ in swift.creations_overwritten]


def test_two_claims_whose_slot_creations_both_succeed_take_the_message_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two consumers claim the one due message at once, their requests answered in turn. Both
    create the message's slot 1 and both creations succeed, the second storing over the
    first: only the claimer whose slot Swift keeps takes the message."""
    monkeypatch.setattr(connect, "KNOWN_OBJECT_PAUSE_S", 0.0)
    swift = TakingTurns()
    swift.creation_window = 2
    a, b = _drivers(swift, "ab")
    [message_id] = a.post_messages(P, Q, [NewMessage('"job"', 3600, 0)], "c", NOW_MS).ids
    swift.take_turns([], then=["a", "b"])
    times = ClaimTimes(60, 60)
    claims = swift.at_once(
        {
            "a": lambda: a.claim(P, Q, times, 1, NOW_MS).claim,
            "b": lambda: b.claim(P, Q, times, 1, NOW_MS).claim,
        }
    )

    assert _kinds(swift) == [names.CLAIMS], "no creation stored over the other"
    held = [c for c in claims.values() if c is not None and c.messages]
    assert len(held) == 1, f"claimed by {claims}"
    assert [m.id for m in held[0].messages] == [message_id]


def test_two_dispatchers_whose_lease_creations_both_succeed_lease_each_push_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two dispatchers lease a queue's two due pushes at once, their requests answered in
    turn. Both create a push's lease object and both creations succeed, the second storing
    over the first: only the dispatcher whose lease Swift keeps sends the push."""
    monkeypatch.setattr(connect, "KNOWN_OBJECT_PAUSE_S", 0.0)
    swift = TakingTurns()
    swift.creation_window = 3
    a, b = _drivers(swift, "ab")
    a.create_queue(P, Q, {}, NOW_MS)
    a.create_subscription(P, Q, NewSubscription("http://h.example/p", 3600, {}, "s"), NOW_MS)
    posted = [NewMessage('"x"', 3600, 0), NewMessage('"y"', 3600, 0)]
    ids = a.post_messages(P, Q, posted, "c", NOW_MS).ids
    # b's first six requests (its listing of what is due, and more), then one each.
    swift.take_turns(["b"] * 6, then=["b", "a"])
    request = LeaseRequest(NOW_MS + 1, 30_000, 10)
    leased = swift.at_once(
        {"a": lambda: a.lease_pushes(P, Q, request), "b": lambda: b.lease_pushes(P, Q, request)}
    )

    assert _kinds(swift) == [names.PUSHES], "no creation stored over the other"
    sent = [d.message.id for deliveries in leased.values() for d in deliveries]
    assert sorted(sent) == sorted(ids), f"leased: {leased}"


def test_two_subscriptions_of_one_subscriber_whose_holder_creations_both_succeed_make_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two requests subscribe one subscriber to a queue at once, their requests answered in
    turn. Both create the subscriber's holder object and both creations succeed, the second
    storing over the first: one subscription is created, and the other request is answered
    with it (as Zaqar answers a subscriber subscribed already)."""
    monkeypatch.setattr(connect, "KNOWN_OBJECT_PAUSE_S", 0.0)
    swift = TakingTurns()
    swift.creation_window = 3
    a, b = _drivers(swift, "ab")
    a.create_queue(P, Q, {}, NOW_MS)
    swift.take_turns([], then=["a", "b"])
    new = NewSubscription("http://h.example/p", 3600, {}, "")
    made = swift.at_once(
        {
            "a": lambda: a.create_subscription(P, Q, new, NOW_MS),
            "b": lambda: b.create_subscription(P, Q, new, NOW_MS),
        }
    )

    assert _kinds(swift) == [names.SUBSCRIPTIONS], "no creation stored over the other"
    assert sorted(created for _, created in made.values()) == [False, True], made
    assert len({subscription_id for subscription_id, _ in made.values()}) == 1, made


OTHER_CREATORS: dict[str, tuple[Callable[[SwiftDriver], object], dict[str, object], list[str]]] = {
    # What creates the queue beside the PUT, the metadata it creates it with, and the
    # order of the two processes' requests that lets its creation store over the PUT's.
    "a subscription": (
        lambda b: b.create_subscription(
            P, Q, NewSubscription("http://h.example/p", 3600, {}, ""), NOW_MS
        ),
        {},
        ["a", "b"],
    ),
    "a post": (
        lambda b: b.post_messages(P, Q, [NewMessage('"job"', 3600, 0)], "c", NOW_MS),
        {},
        ["b", "a"],
    ),
    "a PUT of the queue": (
        lambda b: b.create_queue(P, Q, {"other": 1}, NOW_MS),
        {"other": 1},
        ["a", "b"],
    ),
}


@pytest.mark.parametrize("other", sorted(OTHER_CREATORS))
def test_a_put_of_a_queue_another_creation_overwrote_says_the_queue_existed(
    monkeypatch: pytest.MonkeyPatch, other: str
) -> None:
    """A PUT of a queue with its metadata, beside another request that creates the queue
    (a subscription or a post to a queue not made yet creates it empty): both creations
    succeed and the other's, later, is kept. Before, the PUT answered 201 with its metadata
    lost, and the queue's default delay with it; now it answers that the queue existed,
    as if the other had come first."""
    monkeypatch.setattr(connect, "KNOWN_OBJECT_PAUSE_S", 0.0)
    create, kept, order = OTHER_CREATORS[other]
    swift = TakingTurns()
    swift.creation_window = 3
    a, b, reader = _drivers(swift, "abc")
    swift.take_turns([], then=order)
    answers = swift.at_once(
        {"a": lambda: a.create_queue(P, Q, METADATA, NOW_MS), "b": lambda: create(b)}
    )

    assert _kinds(swift) == [names.QUEUES], "no creation stored over the other"
    assert reader.get_metadata(P, Q) == kept
    assert answers["a"] is False, "the PUT said it created a queue whose metadata is not its own"


# Queues each PUT twice at once: on the all-in-one both creations were accepted for 42 of 100.
RACED_QUEUES = 20


def test_puts_of_one_queue_at_once_on_swift_say_created_only_with_the_metadata_kept(
    swift_aio: SwiftAllInOne,
) -> None:
    """Two server processes PUT each queue at once with different metadata, on a Swift
    all-in-one. Swift accepts both create-only writes of its metadata object now and then;
    a PUT that answers that it created the queue finds its own metadata there."""
    access = dataclasses.replace(access_from_uri(swift_aio.store_uri), settle_ms=RACING_SETTLE_MS)
    accepted: collections.Counter[str] = collections.Counter()
    namespace = f"zd{uuid.uuid4().hex[:12]}"
    drivers = [SwiftDriver(CreationsSeen(access, accepted), namespace) for _ in range(2)]
    drivers[0].prepare()
    metadata = [METADATA, {"other": 1}]
    outcomes = []
    try:
        for number in range(RACED_QUEUES):
            answers = create_queue_at_once(drivers, P, f"q{number}", metadata)
            outcomes.append((answers, drivers[0].get_metadata(P, f"q{number}")))
    finally:
        for driver in drivers:
            driver.close()

    assert max(accepted.values()) == 2, "Swift never accepted both creations of a queue"
    for answers, kept in outcomes:
        assert sum(answers) == 1, (answers, kept)
        assert kept == metadata[answers.index(True)], (answers, kept)
