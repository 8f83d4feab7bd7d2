"""Redis-only behaviour: key layout and the bounded listing scan."""

from __future__ import annotations

import json
import uuid

from tests.storage.test_contract import ALICE, P, Q, page
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import NewMessage
from zaqar_delay.storage.redis.connect import redis_client
from zaqar_delay.storage.redis.driver import RedisDriver
from zaqar_delay.storage.redis.keys import KeySpace


def test_listing_behind_many_hidden_messages_continues_past_the_scan_budget(store_uri: str) -> None:
    clock = FakeClock()
    driver = RedisDriver(
        redis_client(store_uri, 5.0), prefix=f"t{uuid.uuid4().hex[:12]}", list_scan_budget=10
    )
    try:
        hidden = [NewMessage(json.dumps(i), 3600, 60) for i in range(25)]
        driver.post_messages(P, Q, hidden, ALICE, clock.now_ms())
        driver.post_messages(P, Q, [NewMessage('"visible"', 3600, 0)], ALICE, clock.now_ms())
        marker, pages = None, []
        for _ in range(10):
            result = page(driver, clock, marker=marker, limit=5)
            pages.append([m.body for m in result.messages])
            if result.next_marker is None:
                break
            marker = result.next_marker
        # 25 hidden then 1 visible, 10 examined per call: two empty pages that still link on.
        assert pages == [[], [], ["visible"], []]
    finally:
        driver.close()


def test_every_key_of_a_queue_shares_one_hash_tag() -> None:
    keys = KeySpace("zd").queue("project/with}odd{chars", "jobs").as_list()
    tags = {key[key.index("{") + 1 : key.index("}")] for key in keys}
    assert len(tags) == 1
    assert len(set(keys)) == len(keys) == 9
