"""What a project's message quota (``[transport] max_messages_per_project``) reads, on every
store, pooled too: ``Driver.count_messages``, the count it is held to, and
``Driver.remembers_dedup_ids``, which lets a post that only repeats remembered ids through at
the limit."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.helpers.pooled import CONTRACT_STORES
from zaqar_delay import topics
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import ClaimTimes, Deletion, NewMessage
from zaqar_delay.schedules import names
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.redis import counting

pytestmark = pytest.mark.parametrize("store_uri", [*CONTRACT_STORES, "swift"], indirect=True)

P = "project-count"
OTHER = "project-other"


def post(
    driver: Driver,
    clock: FakeClock,
    queue: str,
    count: int,
    *,
    project: str = P,
    ttl: int = 3600,
    delay: int = 0,
) -> None:
    messages = [NewMessage(json.dumps(n), ttl, delay * 1000) for n in range(count)]
    driver.post_messages(project, queue, messages, "a" * 32, clock.now_ms())


def test_a_project_s_messages_are_counted_over_its_queues_delayed_and_claimed_ones_too(
    driver: Driver,
) -> None:
    clock = FakeClock()
    post(driver, clock, "one", 3)
    post(driver, clock, "two", 2, delay=600)
    claim = driver.create_claim(P, "one", ClaimTimes(300, 60), 2, clock.now_ms())
    assert claim is not None and len(claim.messages) == 2
    post(driver, clock, "one", 4, project=OTHER)
    assert driver.count_messages(P, 1000, clock.now_ms()) == 5
    assert driver.count_messages(OTHER, 1000, clock.now_ms()) == 4
    assert driver.count_messages("nobody", 1000, clock.now_ms()) == 0


def test_deleted_and_expired_messages_are_not_counted(driver: Driver) -> None:
    clock = FakeClock()
    post(driver, clock, "short", 3, ttl=60)
    post(driver, clock, "long", 2)
    post(driver, clock, "gone", 4)
    driver.delete_queue(P, "gone")
    assert driver.count_messages(P, 1000, clock.now_ms()) == 5
    clock.advance(61)
    assert driver.count_messages(P, 1000, clock.now_ms()) == 2


def test_a_queue_counts_the_larger_of_its_messages_and_its_remembered_dedup_ids(
    driver: Driver, store_uri: str
) -> None:
    # A remembered id takes the store's space until the message first posted with it would
    # expire, deleted or not: posting with fresh ids and deleting at once cannot pass the
    # quota. A message and its own id count once.
    if store_uri.startswith("swift"):
        pytest.skip("Swift counts messages alone (its dedup records outlive them)")
    clock = FakeClock()

    def post_ids(queue: str, count: int, dedup: bool, ttl: int = 60) -> list[str]:
        messages = [
            NewMessage('"x"', ttl, 0, uuid.uuid4().hex if dedup else "") for _ in range(count)
        ]
        return driver.post_messages(P, queue, messages, "a" * 32, clock.now_ms()).ids

    remembered = post_ids("ids", 5, dedup=True)
    driver.delete_messages(P, "ids", Deletion(remembered), clock.now_ms())
    post_ids("ids", 2, dedup=False, ttl=3600)
    plain = post_ids("plain", 3, dedup=False, ttl=3600)
    post_ids("both", 4, dedup=True)
    assert driver.stats(P, "ids", clock.now_ms()).total == 2
    # "ids": 5 ids remembered beside 2 messages; "plain": 3 messages; "both": 4 of each.
    assert driver.count_messages(P, 1000, clock.now_ms()) == 5 + 3 + 4
    driver.delete_messages(P, "plain", Deletion(plain), clock.now_ms())
    assert driver.count_messages(P, 1000, clock.now_ms()) == 5 + 4
    assert driver.count_messages(OTHER, 1000, clock.now_ms()) == 0
    clock.advance(61)  # the ids lapse with the messages first posted with them
    assert driver.count_messages(P, 1000, clock.now_ms()) == 2


def test_the_server_s_own_queues_are_not_counted(driver: Driver) -> None:
    """A schedule's ticks (messages of a queue of the server's own, each with a dedup id
    remembered for an hour) are the server's bookkeeping, not the project's messages: a
    schedule firing every second would otherwise fill a quota of thousands within the hour,
    and then have its own fires and every post of the project refused."""
    clock = FakeClock()
    post(driver, clock, "q", 2)
    post(driver, clock, topics.stored("alerts"), 1)
    ticks = names.tick_queue("q")
    tick_ids = [NewMessage('"tick"', 3600, 0, f"tick:{n}") for n in range(5)]
    driver.post_messages(P, ticks, tick_ids, "a" * 32, clock.now_ms())
    assert driver.stats(P, ticks, clock.now_ms()).total == 5  # they are stored
    assert driver.count_messages(P, 1000, clock.now_ms()) == 2 + 1


def test_a_count_may_stop_once_it_reaches_most(
    driver: Driver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On Redis, two queues a round trip: the pages of the queue index are followed.
    monkeypatch.setattr(counting, "QUEUES_PER_CALL", 2)
    clock = FakeClock()
    for queue in ("a", "b", "c", "d", "e"):
        post(driver, clock, queue, 3)
    assert driver.count_messages(P, 1000, clock.now_ms()) == 15
    assert 4 <= driver.count_messages(P, 4, clock.now_ms()) <= 15


def test_the_dedup_ids_a_queue_remembers_are_read_deleted_or_not_until_they_lapse(
    driver: Driver,
) -> None:
    clock = FakeClock()
    messages = [NewMessage(json.dumps(n), 60, 0, f"id-{n}") for n in range(2)]
    posted = driver.post_messages(P, "q", messages, "a" * 32, clock.now_ms())
    driver.post_messages(OTHER, "q", [NewMessage("0", 60, 0, "id-other")], "a" * 32, clock.now_ms())

    def remembers(*ids: str, queue: str = "q") -> bool:
        return driver.remembers_dedup_ids(P, queue, list(ids), clock.now_ms())

    assert remembers("id-0", "id-1", "id-0") and remembers("id-1") and remembers()
    assert not remembers("id-0", "id-never") and not remembers("id-other")
    assert not remembers("id-0", queue="elsewhere")
    driver.delete_messages(P, "q", Deletion(posted.ids), clock.now_ms())
    assert remembers("id-0", "id-1")
    clock.advance(61)
    assert not remembers("id-0") and not remembers("id-1")
