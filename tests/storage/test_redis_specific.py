"""Redis-only behaviour: key layout."""

from __future__ import annotations

from zaqar_delay.storage.redis.keys import KeySpace


def test_every_key_of_a_queue_shares_one_hash_tag() -> None:
    keys = KeySpace("zd").queue("project/with}odd{chars", "jobs").as_list()
    tags = {key[key.index("{") + 1 : key.index("}")] for key in keys}
    assert len(tags) == 1
    assert len(set(keys)) == len(keys) == 19
