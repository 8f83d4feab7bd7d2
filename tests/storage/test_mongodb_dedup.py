"""MongoDB's dedup ids when a post fails or stalls between remembering an id and storing its
message: a repeat is never answered with a message that was never stored."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pymongo
import pytest

from tests.conftest import close_test_driver, open_test_driver, store_url
from zaqar_delay import errors
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import NewMessage, Posted
from zaqar_delay.storage.mongodb.dedup import FIRST_POST_GRACE_MS
from zaqar_delay.storage.mongodb.driver import MongoDriver

P, Q = "p", "q"
ALICE = "a" * 32


@pytest.fixture
def mongo(request: pytest.FixtureRequest) -> Iterator[MongoDriver]:
    driver = open_test_driver(store_url(request, "mongodb"))
    assert isinstance(driver, MongoDriver)
    driver.create_queue(P, Q, {}, FakeClock().now_ms())
    yield driver
    close_test_driver(driver)


class Refusing:
    """Makes one method of one collection refuse every call, as a store going away would;
    ``refused`` counts the calls refused."""

    def __init__(self, patched: pytest.MonkeyPatch, collection: Any, method: str) -> None:
        self.refused = 0

        def refuse(*args: Any, **kwargs: Any) -> None:
            self.refused += 1
            raise pymongo.errors.AutoReconnect(f"{method} refused")

        patched.setattr(collection, method, refuse)


def test_a_repeat_of_a_post_refused_before_its_dedup_id_was_forgotten_is_stored(
    mongo: MongoDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MongoDB went away mid-post: the message was not stored, and its dedup id could not be
    withdrawn. Before, a repeat was answered with the id of the message never stored."""
    clock = FakeClock()
    post = [NewMessage('"once"', 3600, 0, "job-1")]
    with monkeypatch.context() as patched:
        inserts = Refusing(patched, mongo._messages, "insert_many")
        withdrawals = Refusing(patched, mongo._dedup._collection, "delete_many")
        with pytest.raises(errors.StorageUnavailable):
            mongo.post_messages(P, Q, post, ALICE, clock.now_ms())
    assert inserts.refused == 1, "the message was stored"
    assert withdrawals.refused == 1, "the dedup id was withdrawn"
    assert mongo.stats(P, Q, clock.now_ms()).total == 0

    clock.advance(ms=FIRST_POST_GRACE_MS)  # past the time its post could still be storing it
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


def test_a_repeat_while_the_first_post_is_being_stored_waits_for_it(mongo: MongoDriver) -> None:
    """The first post remembered the dedup id and has not stored its message yet: a repeat
    then waits for it, and is its duplicate."""
    clock = FakeClock()
    post = [NewMessage('"once"', 3600, 0, "job-3")]
    repeats: list[Posted] = []
    insert_many = mongo._messages.insert_many
    first_insert: list[bool] = []

    def repeated_meanwhile(*args: Any, **kwargs: Any) -> Any:
        if first_insert:
            return insert_many(*args, **kwargs)
        first_insert.append(True)
        repeat = threading.Thread(
            target=lambda: repeats.append(mongo.post_messages(P, Q, post, ALICE, clock.now_ms()))
        )
        repeat.start()
        time.sleep(0.5)  # the repeat has read the unconfirmed id, and waits
        assert repeat.is_alive(), "the repeat did not wait for the first post"
        inserted = insert_many(*args, **kwargs)
        repeat.join(15)
        return inserted

    with monkeypatch_insert(mongo, repeated_meanwhile):
        first = mongo.post_messages(P, Q, post, ALICE, clock.now_ms())
    [repeat] = repeats
    assert (repeat.ids, repeat.duplicates) == (first.ids, (0,))
    assert mongo.stats(P, Q, clock.now_ms()).total == 1


def test_a_post_of_several_ids_waits_holding_only_ids_ordered_before_the_awaited_one(
    mongo: MongoDriver,
) -> None:
    """A post of ids b and a meets a being stored by another post: it gives b back and waits
    for a, so a post of b alone is not kept waiting on it. Posts wait only in id order, so
    none waits on a post that waits on it."""
    clock = FakeClock()
    insert_many = mongo._messages.insert_many
    results: dict[str, Posted] = {}
    storing_a: list[bool] = []

    def post(name: str, *dedup_ids: str) -> threading.Thread:
        messages = [NewMessage(f'"{name}-{i}"', 3600, 0, i) for i in dedup_ids]
        thread = threading.Thread(
            target=lambda: results.update(
                {name: mongo.post_messages(P, Q, messages, ALICE, clock.now_ms())}
            )
        )
        thread.start()
        return thread

    def a_stalls(*args: Any, **kwargs: Any) -> Any:
        if storing_a:
            return insert_many(*args, **kwargs)
        storing_a.append(True)
        both = post("both", "b", "a")
        time.sleep(0.5)  # "both" met a unconfirmed, and waits for it
        assert both.is_alive(), "the post of both ids did not wait for a"
        alone = post("alone", "b")
        alone.join(5)
        assert not alone.is_alive(), "a post of b alone waited on the post that waits for a"
        inserted = insert_many(*args, **kwargs)
        both.join(15)
        return inserted

    with monkeypatch_insert(mongo, a_stalls):
        first = mongo.post_messages(
            P, Q, [NewMessage('"first-a"', 3600, 0, "a")], ALICE, clock.now_ms()
        )
    assert results["alone"].duplicates == ()
    assert results["both"].ids == [results["alone"].ids[0], first.ids[0]]
    assert results["both"].duplicates == (0, 1)
    assert mongo.stats(P, Q, clock.now_ms()).total == 2


@contextlib.contextmanager
def monkeypatch_insert(mongo: MongoDriver, insert_many: Callable[..., Any]) -> Iterator[None]:
    """Messages inserted through ``insert_many`` meanwhile."""
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(mongo._messages, "insert_many", insert_many)
        yield
