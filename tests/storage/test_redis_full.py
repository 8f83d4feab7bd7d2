"""A Redis store at its ``maxmemory`` (``noeviction``, the policy the driver requires): posts
are refused with a 503 that says the store is full, and the queue still drains."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from testbed.processes import RedisServer
from zaqar_delay.errors import StoreFull
from zaqar_delay.models import ClaimTimes, Deletion, NewMessage
from zaqar_delay.storage.redis.connect import redis_client
from zaqar_delay.storage.redis.driver import RedisDriver

NOW = 1_700_000_000_000
BODY = '"' + "x" * 4000 + '"'  # JSON text


@pytest.fixture
def small_store() -> Iterator[RedisServer]:
    server = RedisServer(
        extra_args=["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"]
    ).start()
    yield server
    server.stop()


def test_a_full_store_refuses_posts_as_full_and_still_drains(small_store: RedisServer) -> None:
    client = redis_client(small_store.url, 5.0)
    driver = RedisDriver(client, prefix=f"f{uuid.uuid4().hex[:8]}")
    try:
        driver.create_queue("p", "q", {}, NOW)
        batch = [NewMessage(body_json=BODY, ttl_s=600, delay_ms=0)] * 10
        posted = 0
        with pytest.raises(StoreFull) as full:
            for _ in range(2000):
                driver.post_messages("p", "q", batch, "c", NOW)
                posted += len(batch)
        memory = redis.Redis(port=small_store.port).info("memory")
        # Refused at its limit (the reply's own buffers are freed by now).
        assert memory["used_memory"] > 0.95 * memory["maxmemory"] > 0, "the store was not full"
        assert full.value.tells_the_client and "is full" in full.value.description
        assert driver.stats("p", "q", NOW).total == posted, "the refused post wrote nothing"

        # Claims and deletes still work, and free room for posts again.
        for _ in range(20):
            claim = driver.claim("p", "q", ClaimTimes(60, 60), 20, NOW).claim
            assert claim is not None
            ids = [m.id for m in claim.messages]
            driver.delete_messages("p", "q", Deletion(ids, [claim.id]), NOW)
        assert driver.stats("p", "q", NOW).total == posted - 400
        driver.post_messages("p", "q", batch, "c", NOW)
    finally:
        driver.close()
