"""Redis-only behaviour: key layout, wake-ups for waiting claims."""

from __future__ import annotations

import json
import threading

import pytest

from tests.conftest import close_test_driver, open_test_driver, store_url
from zaqar_delay.models import NewMessage
from zaqar_delay.storage.redis.keys import KeySpace


def test_every_key_of_a_queue_shares_one_hash_tag() -> None:
    keys = KeySpace("zd").queue("project/with}odd{chars", "jobs").as_list()
    tags = {key[key.index("{") + 1 : key.index("}")] for key in keys}
    assert len(tags) == 1
    assert len(set(keys)) == len(keys) == 11


@pytest.fixture(params=["embedded", "redis-server"])
def redis_uri(request: pytest.FixtureRequest) -> str:
    return store_url(request, request.param)


def test_writes_wake_announced_queues_only(redis_uri: str) -> None:
    driver = open_test_driver(redis_uri)
    wakeups = driver.wakeups()
    assert wakeups is not None
    woken: list[str] = []
    listening, stop = threading.Event(), threading.Event()
    listener = threading.Thread(target=wakeups.listen, args=(woken.append, listening.set, stop))
    listener.start()
    try:
        assert listening.wait(5)
        message = [NewMessage(json.dumps("x"), 60, 0)]
        driver.post_messages("p", "quiet", message, "c", 1_800_000_000_000)
        wakeups.announce("p", "watched", 10_000)
        driver.post_messages("p", "watched", message, "c", 1_800_000_000_000)
        deadline = threading.Event()
        for _ in range(50):
            if woken:
                break
            deadline.wait(0.1)
        assert woken == [wakeups.channel("p", "watched")]
    finally:
        stop.set()
        listener.join(5)
        close_test_driver(driver)
