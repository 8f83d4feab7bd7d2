"""On Redis a project's count holds its remembered dedup ids too: each takes the store's memory
until the message first posted with it would expire, deleted or not, so posting with fresh ids
and deleting at once cannot fill the store past the message quota."""

from __future__ import annotations

import uuid

import pytest

from zaqar_delay.clock import FakeClock
from zaqar_delay.models import Deletion, NewMessage
from zaqar_delay.storage.base import Driver

pytestmark = pytest.mark.parametrize("store_uri", ["embedded", "redis-server"], indirect=True)

P = "project-dedup"


def post(driver: Driver, clock: FakeClock, queue: str, count: int, dedup: bool) -> list[str]:
    messages = [NewMessage('"x"', 60, 0, uuid.uuid4().hex if dedup else "") for _ in range(count)]
    return driver.post_messages(P, queue, messages, "a" * 32, clock.now_ms()).ids


def test_a_queue_counts_the_larger_of_its_messages_and_its_remembered_ids(
    driver: Driver,
) -> None:
    clock = FakeClock()
    remembered = post(driver, clock, "ids", 5, dedup=True)
    driver.delete_messages(P, "ids", Deletion(remembered), clock.now_ms())
    post(driver, clock, "ids", 2, dedup=False)
    plain = post(driver, clock, "plain", 3, dedup=False)
    assert driver.stats(P, "ids", clock.now_ms()).total == 2
    # "ids": 5 ids remembered beside 2 messages; "plain": 3 messages.
    assert driver.count_messages(P, 1000, clock.now_ms()) == 5 + 3
    driver.delete_messages(P, "plain", Deletion(plain), clock.now_ms())
    assert driver.count_messages(P, 1000, clock.now_ms()) == 5
    clock.advance(61)  # the ids lapse with the messages first posted with them
    assert driver.count_messages(P, 1000, clock.now_ms()) == 0
