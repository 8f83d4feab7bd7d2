"""Redis-only behaviour: key layout, and constants the scripts share with the drivers."""

from __future__ import annotations

import re
from pathlib import Path

from zaqar_delay.storage.mongodb import push_limits as mongodb_push_limits
from zaqar_delay.storage.redis import pushes as redis_pushes
from zaqar_delay.storage.redis.keys import KeySpace


def test_every_key_of_a_queue_shares_one_hash_tag() -> None:
    keys = KeySpace("zd").queue("project/with}odd{chars", "jobs").as_list()
    tags = {key[key.index("{") + 1 : key.index("}")] for key in keys}
    assert len(tags) == 1
    assert len(set(keys)) == len(keys) == 19


def test_parked_pushes_start_at_one_score_in_the_scripts_and_both_drivers() -> None:
    lib = Path(redis_pushes.__file__).parent / "lua" / "lib.lua"
    [exponent] = re.findall(r"local PARKED = 2 \^ (\d+)", lib.read_text())
    assert redis_pushes.PARKED == mongodb_push_limits.PARKED == 2 ** int(exponent)
