"""MongoDB posts that fail or stall between their writes (dedup ids, messages, pushes owed):
a refused post leaves nothing, and a repeat is never answered with a message that was never
stored or never pushed."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pymongo
import pytest

from tests.helpers.dedup_stalls import repeated_while_stalled
from tests.helpers.stores import close_test_driver, every_message, open_test_driver, store_url
from zaqar_delay import errors
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import (
    ClaimTimes,
    LeaseRequest,
    ListPage,
    ListQuery,
    NewMessage,
    NewSubscription,
    OverLimit,
)
from zaqar_delay.storage.dedup_reservation import DedupRecord
from zaqar_delay.storage.mongodb.dedup import fence
from zaqar_delay.storage.mongodb.driver import MongoDriver
from zaqar_delay.storage.mongodb.errors import duplicate_positions

P, Q = "p", "q"
ALICE = "a" * 32
LEASE_MS = 30_000


@pytest.fixture
def mongo(request: pytest.FixtureRequest) -> Iterator[MongoDriver]:
    driver = open_test_driver(store_url(request, "mongodb"))
    assert isinstance(driver, MongoDriver)
    driver.create_queue(P, Q, {}, FakeClock().now_ms())
    yield driver
    close_test_driver(driver)


class ProcessKilled(BaseException):
    """The process dying mid-call: nothing after the call runs, not even an undo."""


class Refusing:
    """Makes one method of one collection fail every call, with ``fault`` (by default, as a
    store going away would); ``refused`` counts the calls."""

    def __init__(
        self,
        patched: pytest.MonkeyPatch,
        collection: Any,
        method: str,
        fault: type[BaseException] | None = None,
    ) -> None:
        self.refused = 0

        def refuse(*args: Any, **kwargs: Any) -> None:
            self.refused += 1
            if fault is not None:
                raise fault(method)
            raise pymongo.errors.AutoReconnect(f"{method} refused")

        patched.setattr(collection, method, refuse)


def owed(mongo: MongoDriver, clock: FakeClock) -> list[str]:
    """The ids of the messages whose pushes are due now."""
    return [
        d.message.id for d in mongo.lease_pushes(P, Q, LeaseRequest(clock.now_ms(), LEASE_MS, 10))
    ]


def test_a_repeat_of_a_post_refused_before_its_dedup_id_was_forgotten_is_stored(
    mongo: MongoDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MongoDB went away mid-post: the message was not stored, and its dedup id could not be
    withdrawn. Before, a repeat was answered with the id of the message never stored."""
    clock = FakeClock()
    post = [NewMessage('"once"', 3600, 0, "job-1")]
    with monkeypatch.context() as patched:
        inserts = Refusing(patched, mongo._messages, "insert_many")
        withdrawals = Refusing(patched, mongo._dedup_records._collection, "delete_many")
        with pytest.raises(errors.StorageUnavailable):
            mongo.post_messages(P, Q, post, ALICE, clock.now_ms())
    assert inserts.refused == 1, "the message was stored"
    assert withdrawals.refused == 1, "the dedup id was withdrawn"
    assert mongo.stats(P, Q, clock.now_ms()).total == 0

    clock.advance(ms=mongo._dedup.dead_after_ms)  # past the time its post could still be storing it
    stored = mongo.post_messages(P, Q, post, ALICE, clock.now_ms())
    assert stored.duplicates == ()
    [message] = mongo.get_messages(P, Q, stored.ids, clock.now_ms())
    assert message.body == "once"
    repeat = mongo.post_messages(P, Q, post, ALICE, clock.now_ms())
    assert (repeat.ids, repeat.duplicates) == (stored.ids, (0,))


def test_a_repeat_of_a_refused_post_is_stored_at_once_when_its_id_was_withdrawn(
    mongo: MongoDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    post = [NewMessage('"once"', 3600, 0, "job-2")]
    with monkeypatch.context() as patched:
        inserts = Refusing(patched, mongo._messages, "insert_many")
        with pytest.raises(errors.StorageUnavailable):
            mongo.post_messages(P, Q, post, ALICE, clock.now_ms())
    assert inserts.refused == 1, "the message was stored"
    stored = mongo.post_messages(P, Q, post, ALICE, clock.now_ms())
    assert stored.duplicates == ()
    assert len(mongo.get_messages(P, Q, stored.ids, clock.now_ms())) == 1


def test_a_post_whose_pushes_could_not_be_owed_is_refused_whole(
    mongo: MongoDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the messages stayed stored, never pushed, behind a 503."""
    clock = FakeClock()
    mongo.create_subscription(
        P, Q, NewSubscription("http://127.0.0.1:9/a", 3600, {}, "s"), clock.now_ms()
    )
    post = [NewMessage('"once"', 3600, 0, "job-3"), NewMessage('"plain"', 3600, 0)]
    with monkeypatch.context() as patched:
        pushes = Refusing(patched, mongo._pushes, "insert_many")
        with pytest.raises(errors.StorageUnavailable):
            mongo.post_messages(P, Q, post, ALICE, clock.now_ms())
    assert pushes.refused == 1, "the pushes were owed"
    assert mongo.stats(P, Q, clock.now_ms()).total == 0
    assert owed(mongo, clock) == []

    stored = mongo.post_messages(P, Q, post, ALICE, clock.now_ms())
    assert stored.duplicates == ()
    assert sorted(owed(mongo, clock)) == sorted(stored.ids)


def test_a_repeat_of_a_post_killed_before_owing_its_pushes_owes_them(
    mongo: MongoDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process died between storing the message and owing its push: the repeat, once the
    first post's time is up, is its duplicate and owes the push."""
    clock = FakeClock()
    mongo.create_subscription(
        P, Q, NewSubscription("http://127.0.0.1:9/a", 3600, {}, "s"), clock.now_ms()
    )
    post = [NewMessage('"once"', 3600, 0, "job-4")]
    with monkeypatch.context() as patched:
        pushes = Refusing(patched, mongo._pushes, "insert_many", ProcessKilled)
        with pytest.raises(ProcessKilled):
            mongo.post_messages(P, Q, post, ALICE, clock.now_ms())
    assert pushes.refused == 1, "the pushes were owed"
    [stored] = every_message(mongo, P, Q, clock.now_ms())
    assert owed(mongo, clock) == []

    clock.advance(ms=mongo._dedup.dead_after_ms)
    repeat = mongo.post_messages(P, Q, post, ALICE, clock.now_ms())
    assert (repeat.ids, repeat.duplicates) == ([stored.id], (0,))
    assert owed(mongo, clock) == [stored.id]
    assert mongo.stats(P, Q, clock.now_ms()).total == 1


def test_dead_letters_whose_pushes_could_not_be_owed_are_owed_when_copied_again(
    mongo: MongoDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first copy into the dead-letter queue stored the copy and failed to owe its push;
    the claim that copies it again (the original is still held) owes it."""
    clock = FakeClock()
    mongo.create_subscription(
        P, "dlq", NewSubscription("http://127.0.0.1:9/a", 3600, {}, "s"), clock.now_ms()
    )
    posted = mongo.post_messages(P, Q, [NewMessage('"dead"', 3600, 0)], ALICE, clock.now_ms())
    # As if from another store: in this one, dead letters move by an update, not a copy.
    dead = [
        dataclasses.replace(m, id=f"{m.id}-elsewhere")
        for m in mongo.get_messages(P, Q, posted.ids, clock.now_ms())
    ]
    with monkeypatch.context() as patched:
        pushes = Refusing(patched, mongo._pushes, "insert_many")
        with pytest.raises(errors.StorageUnavailable):
            mongo.receive_dead_letters(P, OverLimit("dlq", None, tuple(dead)), clock.now_ms())
    assert pushes.refused == 1, "the push was owed"
    assert mongo.stats(P, "dlq", clock.now_ms()).total == 1

    mongo.receive_dead_letters(P, OverLimit("dlq", None, tuple(dead)), clock.now_ms())
    assert mongo.stats(P, "dlq", clock.now_ms()).total == 1
    leased = mongo.lease_pushes(P, "dlq", LeaseRequest(clock.now_ms(), LEASE_MS, 10))
    assert [d.message.id for d in leased] == [m.id for m in dead]


@contextlib.contextmanager
def stored_before_the_first_insert(
    mongo: MongoDriver, stored: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
) -> Iterator[list[pymongo.errors.BulkWriteError]]:
    """The first messages inserted meanwhile find ``stored(documents)`` already stored (as a
    first attempt whose answer was lost leaves them); yields what that insert was refused."""
    insert_many = mongo._messages.insert_many
    refusals: list[pymongo.errors.BulkWriteError] = []
    inserted: list[bool] = []

    def insert(documents: list[dict[str, Any]], **kwargs: Any) -> Any:
        if inserted:
            return insert_many(documents, **kwargs)
        inserted.append(True)
        insert_many(stored(documents))
        try:
            return insert_many(documents, **kwargs)
        except pymongo.errors.BulkWriteError as exc:
            refusals.append(exc)
            raise

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(mongo._messages, "insert_many", insert)
        yield refusals


def test_a_retried_insert_that_finds_part_of_its_first_attempt_stores_the_post_whole(
    mongo: MongoDriver,
) -> None:
    """pymongo sends a write again when its answer was lost; a server that applied part of
    the first attempt then refuses the retry for duplicates of the post's own messages.
    Before, the post was undone and answered 500."""
    clock = FakeClock()
    messages = [NewMessage(json.dumps(i), 3600, 0) for i in range(10)]
    with stored_before_the_first_insert(mongo, lambda documents: documents[:3]) as refusals:
        posted = mongo.post_messages(P, Q, messages, ALICE, clock.now_ms())
    assert [duplicate_positions(exc) for exc in refusals] == [[0]], "no retry met its first"
    assert mongo.stats(P, Q, clock.now_ms()).total == 10
    stored = mongo.get_messages(P, Q, posted.ids, clock.now_ms())
    assert [m.body for m in stored] == list(range(10))


def test_a_post_meeting_another_message_at_one_of_its_positions_places_it_past(
    mongo: MongoDriver,
) -> None:
    """Duplicates that are not the post's own messages (another message took one of its
    posting positions): the post is stored whole, the displaced message after every message
    the queue holds (``test_mongodb_positions`` has how that happens). Before, the post was
    undone and answered 503."""
    clock = FakeClock()
    messages = [NewMessage(json.dumps(i), 3600, 0) for i in range(5)]

    def another_at_the_first_position(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**documents[0], "_id": "another message", "b": '"another"'}]

    with stored_before_the_first_insert(mongo, another_at_the_first_position) as refusals:
        posted = mongo.post_messages(P, Q, messages, ALICE, clock.now_ms())
    assert [duplicate_positions(exc) for exc in refusals] == [[0]], "no insert was refused"
    stored = mongo.get_messages(P, Q, posted.ids, clock.now_ms())
    assert [m.body for m in stored] == list(range(5))
    assert mongo.stats(P, Q, clock.now_ms()).total == 6
    position = {d["b"]: d["k"] for d in mongo._messages.find({}, {"b": 1, "k": 1})}
    assert position["0"] == max(position.values()) > position['"another"']


def test_a_post_stalled_past_its_grace_is_refused_once_a_repeat_took_its_dedup_id_over(
    mongo: MongoDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first post reserved its dedup id, then stalled (a failover, a paused process)
    past its grace before inserting its messages. A repeat takes the id over and stores the
    message; the first post's insert, arriving late, is refused (503) and the post stores
    nothing. Before, the message was stored twice."""
    clock = FakeClock()
    post = [NewMessage('"once"', 3600, 0, "job-5"), NewMessage('"plain"', 3600, 0)]
    later = FakeClock(clock.now_ms() + mongo._dedup.dead_after_ms)  # the repeat's clock
    with monkeypatch.context() as patched:
        repeats = repeated_while_stalled(
            patched, mongo, lambda: mongo.post_messages(P, Q, post[:1], ALICE, later.now_ms())
        )
        with pytest.raises(errors.StorageUnavailable, match="took a dedup id of it over"):
            mongo.post_messages(P, Q, post, ALICE, clock.now_ms())
    [repeat] = repeats
    assert repeat.duplicates == (), "the repeat took the id over and stored the message"

    [message] = every_message(mongo, P, Q, later.now_ms())
    assert (message.id, message.body) == (repeat.ids[0], "once")
    assert mongo.stats(P, Q, later.now_ms()).total == 1
    assert mongo.count_messages(P, 100, later.now_ms()) == 1
    claim = mongo.claim(P, Q, ClaimTimes(60, 60), 10, later.now_ms()).claim
    assert claim is not None and [m.id for m in claim.messages] == repeat.ids
    again = mongo.post_messages(P, Q, post[:1], ALICE, later.now_ms())
    assert (again.ids, again.duplicates) == (repeat.ids, (0,))


def unconfirmed_record(mongo: MongoDriver, clock: FakeClock, dedup_id: str) -> DedupRecord:
    """The record of a post that died after reserving ``dedup_id``, its message not stored."""
    message_id = secrets.token_hex(16)
    record = DedupRecord(dedup_id, message_id, clock.now_ms() + 3_600_000, clock.now_ms())
    [(made, created)] = mongo._dedup_records.create(P, Q, [record])
    assert made and created is not None
    return created


def test_a_message_fenced_by_two_repeats_is_fenced_once_and_stays_out_of_sight(
    mongo: MongoDriver,
) -> None:
    clock = FakeClock()
    record = unconfirmed_record(mongo, clock, "job-6")
    assert not mongo._complete_post(P, Q, record, clock.now_ms())
    assert not mongo._complete_post(P, Q, record, clock.now_ms())
    [fenced] = mongo._messages.find({"_id": record.message_id})
    assert (fenced["p"], fenced["q"], fenced["e"]) == (P, Q, 0)
    assert fenced["ex"].timestamp() * 1000 == pytest.approx(record.expires_ms)
    with pytest.raises(pymongo.errors.DuplicateKeyError):
        mongo._messages.insert_one({"_id": record.message_id, "p": P, "q": Q, "k": 1, "e": 1})
    assert every_message(mongo, P, Q, clock.now_ms()) == []
    assert mongo.stats(P, Q, clock.now_ms()).total == 0
    assert mongo.list_messages(P, Q, ListQuery(None, 10, ALICE, echo=True), clock.now_ms()) == (
        ListPage((), None)
    )


def test_a_fence_whose_posting_position_another_fence_holds_takes_another(
    mongo: MongoDriver,
) -> None:
    clock = FakeClock()
    record = unconfirmed_record(mongo, clock, "job-7")
    in_the_way = fence(P, Q, record.message_id, record.expires_ms, 0)
    mongo._messages.insert_one({**in_the_way, "_id": "another"})
    assert not mongo._complete_post(P, Q, record, clock.now_ms())
    [fenced] = mongo._messages.find({"_id": record.message_id})
    assert fenced["k"] == fence(P, Q, record.message_id, record.expires_ms, 1)["k"]
