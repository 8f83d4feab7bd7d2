"""Purging or deleting a queue of many messages on Redis: the messages are gone in one call,
their storage is freed in slices (``queue.lua`` "sweep", ``lib.lua`` ``free_trash``), so no
call holds the store (and every other queue on it) for long.

Each test runs the purge or deletion script itself where it needs the state between that call
and the sweeps (as a server that stops right after it leaves it), and checks what a client
sees then, before it checks what the sweeps free. A removal a stopped server left is finished
by the next server to start, or by the next removal once it was listed long enough.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from tests.helpers.stores import opened_redis_driver, store_url
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import ClaimTimes, ListQuery, NewMessage
from zaqar_delay.storage.redis import layout
from zaqar_delay.storage.redis.driver import RedisDriver
from zaqar_delay.storage.redis.pushes import queue_member
from zaqar_delay.storage.redis.removal import ABANDONED_AFTER_S, frees_in_background

P, Q, OTHER = "p", "q", "other"
CLIENT = uuid.uuid4().hex
# More messages than one sweep frees of the ready index, and more buckets than it frees.
MANY = layout.SWEEP_ENTRIES + 3 * layout.SWEEP_BUCKETS * layout.BUCKET_SIZE


@pytest.fixture(params=["embedded", "redis-server", "redis-cluster"])
def redis_driver(request: pytest.FixtureRequest) -> Iterator[RedisDriver]:
    yield from opened_redis_driver(request)


def post(driver: RedisDriver, clock: FakeClock, count: int, queue: str = Q) -> list[str]:
    ids: list[str] = []
    for start in range(0, count, 1000):
        batch = [
            NewMessage(json.dumps({"n": n}), 3600, 0)
            for n in range(start, min(count, start + 1000))
        ]
        ids += driver.post_messages(P, queue, batch, CLIENT, clock.now_ms()).ids
    return ids


def queue_keys(driver: RedisDriver, queue: str = Q) -> set[str]:
    keys = driver._keys.queue(P, queue)
    tag = keys.queue[: keys.queue.rindex("}") + 1]
    return {key.decode() for key in driver._client.scan_iter(match=f"{tag}:*", count=1000)}


def trash_left(driver: RedisDriver, queue: str = Q) -> tuple[int, dict[str, int]]:
    """The buckets in the queue's trash, and each detached index's entries."""
    keys = driver._keys.queue(P, queue)
    client = driver._client
    indexes = {}
    for name, state in client.hgetall(keys.trash_indexes).items():
        if name != b"#":
            size = client.zcard(name) if state.startswith(b"z") else client.hlen(name)
            indexes[name.decode()] = size
    return client.zcard(keys.trash), indexes


def sweep(driver: RedisDriver) -> None:
    """The sweeps a server runs after a purge or deletion."""
    while driver._run("queue", P, Q, "sweep", 0, ""):
        pass


def test_a_purge_empties_the_queue_at_once_and_frees_its_storage_in_slices(
    redis_driver: RedisDriver, clock: FakeClock
) -> None:
    ids = post(redis_driver, clock, MANY)
    claim = redis_driver.claim(P, Q, ClaimTimes(60, 60), 10, clock.now_ms()).claim
    assert claim is not None and len(claim.messages) == 10
    buckets = MANY // layout.BUCKET_SIZE + 1

    left = redis_driver._run("queue", P, Q, "purge", 0, "")

    # The messages are gone for every reader before any of their storage is freed.
    assert trash_left(redis_driver) == (
        buckets,
        {redis_driver._keys.queue(P, Q).ready + ":t1": MANY - 10},
    )
    assert left == buckets + 1
    assert redis_driver.stats(P, Q, clock.now_ms()).total == 0
    old = [ids[0], ids[-1], claim.messages[0].id]
    assert list(redis_driver.get_messages(P, Q, old, clock.now_ms())) == []
    everything = ListQuery(None, 10, CLIENT, echo=True, include_claimed=True, include_delayed=True)
    assert list(redis_driver.list_messages(P, Q, everything, clock.now_ms()).messages) == []
    assert redis_driver.claim(P, Q, ClaimTimes(60, 60), 10, clock.now_ms()).claim is None

    # One sweep frees one slice: SWEEP_BUCKETS buckets and SWEEP_ENTRIES index entries.
    ready = redis_driver._keys.queue(P, Q).ready + ":t1"
    buckets_before, indexes_before = trash_left(redis_driver)
    redis_driver._run("queue", P, Q, "sweep", 0, "")
    assert trash_left(redis_driver) == (
        buckets_before - layout.SWEEP_BUCKETS,
        {ready: indexes_before[ready] - layout.SWEEP_ENTRIES},
    )

    redis_driver.purge(P, Q)  # purges nothing more, and frees the rest
    keys = redis_driver._keys.queue(P, Q)
    assert queue_keys(redis_driver) == {keys.queue}


def test_big_hashes_are_taken_apart_in_slices_too(
    redis_driver: RedisDriver, clock: FakeClock
) -> None:
    """Remembered dedup ids: a hash (taken apart by HSCAN, its cursor kept between sweeps)
    and a sorted set; a purge forgets them, as it always did."""
    count = 2 * layout.SWEEP_ENTRIES + 1
    dedup_ids = [f"d{n}" for n in range(count)]
    for start in range(0, count, 1000):
        batch = [NewMessage('"x"', 3600, 0, d) for d in dedup_ids[start : start + 1000]]
        redis_driver.post_messages(P, Q, batch, CLIENT, clock.now_ms())
    keys = redis_driver._keys.queue(P, Q)

    redis_driver._run("queue", P, Q, "purge", 0, "")

    detached = redis_driver._client.hgetall(keys.trash_indexes)
    assert {name.decode(): state[:1] for name, state in detached.items() if name != b"#"} == {
        f"{keys.ready}:t1": b"z",
        f"{keys.dedup}:t2": b"h",
        f"{keys.dedup_expiry}:t3": b"z",
    }
    _, before = trash_left(redis_driver)
    redis_driver._run("queue", P, Q, "sweep", 0, "")
    _, after = trash_left(redis_driver)
    # The slice is shared: the ready index (first in line) took all of it.
    assert after[f"{keys.ready}:t1"] == before[f"{keys.ready}:t1"] - layout.SWEEP_ENTRIES
    sweep(redis_driver)
    assert queue_keys(redis_driver) == {keys.queue}
    repeat = [NewMessage('"y"', 3600, 0, "d7")]
    again = redis_driver.post_messages(P, Q, repeat, CLIENT, clock.now_ms())
    assert [m.body for m in redis_driver.get_messages(P, Q, again.ids, clock.now_ms())] == ["y"]


def test_a_deleted_queue_frees_its_storage_and_leaves_no_key(
    redis_driver: RedisDriver, clock: FakeClock
) -> None:
    post(redis_driver, clock, MANY)
    assert redis_driver.claim(P, Q, ClaimTimes(60, 60), 10, clock.now_ms()).claim is not None
    assert len(queue_keys(redis_driver)) > 2 * (MANY // layout.BUCKET_SIZE)

    redis_driver.delete_queue(P, Q)

    assert queue_keys(redis_driver) == set()


def test_messages_posted_before_the_sweeps_end_keep_their_storage(
    redis_driver: RedisDriver, clock: FakeClock
) -> None:
    """New messages never land in a bucket of the trash: after a purge they start a new
    bucket; after a deletion, the queue created again counts past the trash."""
    old = post(redis_driver, clock, layout.SWEEP_BUCKETS * layout.BUCKET_SIZE + 5)
    assert redis_driver._run("queue", P, Q, "purge", 0, "") > 0
    after_purge = post(redis_driver, clock, 3)  # in the bucket the last old ones are in, were
    # the sequence not moved on past it
    found = redis_driver.get_messages(P, Q, after_purge, clock.now_ms())
    assert [m.id for m in found] == after_purge
    assert redis_driver._run("queue", P, Q, "delete", 0, "") > 0
    redis_driver.create_queue(P, Q, {}, clock.now_ms())
    # Several buckets' worth: the buckets a queue counting from 0 would put them in are in the
    # trash.
    after_delete = post(redis_driver, clock, 4 * layout.BUCKET_SIZE)

    sweep(redis_driver)

    assert trash_left(redis_driver) == (0, {})
    found = redis_driver.get_messages(P, Q, old + after_purge + after_delete, clock.now_ms())
    # The messages posted after the purge went with the deletion; those after it are kept.
    assert [m.id for m in found] == after_delete
    assert [m.body for m in found] == [{"n": n} for n in range(4 * layout.BUCKET_SIZE)]
    assert len(set(after_delete) & set(old)) == 0
    assert redis_driver.stats(P, Q, clock.now_ms()).total == 4 * layout.BUCKET_SIZE


def abandon_purge(driver: RedisDriver, listed_at: float) -> None:
    """What a server that stops right after its purge call leaves: the queue listed in the
    removals index, its trash full."""
    driver._client.zadd(driver._keys.removals(), {queue_member(P, Q): listed_at})
    driver._run("queue", P, Q, "purge", 0, "")
    buckets, indexes = trash_left(driver)
    assert buckets > 0 and indexes


def test_a_removal_a_stopped_server_left_is_finished_by_the_next_start(
    redis_driver: RedisDriver, clock: FakeClock
) -> None:
    post(redis_driver, clock, MANY)
    abandon_purge(redis_driver, time.time())

    redis_driver.prepare()

    assert trash_left(redis_driver) == (0, {})
    assert queue_keys(redis_driver) == {redis_driver._keys.queue(P, Q).queue}
    assert redis_driver._client.zcard(redis_driver._keys.removals()) == 0


def test_a_removal_listed_too_long_ago_is_finished_by_the_next_one(
    redis_driver: RedisDriver, clock: FakeClock
) -> None:
    post(redis_driver, clock, MANY)
    abandon_purge(redis_driver, time.time() - 5)
    post(redis_driver, clock, 10, queue=OTHER)

    redis_driver.purge(P, OTHER)  # a removal still running elsewhere is left to its server
    assert trash_left(redis_driver)[0] > 0

    abandon_purge(redis_driver, time.time() - ABANDONED_AFTER_S - 1)
    redis_driver.purge(P, OTHER)

    assert trash_left(redis_driver) == (0, {})
    assert redis_driver._client.zcard(redis_driver._keys.removals()) == 0


def test_another_queue_is_untouched(redis_driver: RedisDriver, clock: FakeClock) -> None:
    kept = post(redis_driver, clock, 300, queue=OTHER)
    post(redis_driver, clock, MANY)
    redis_driver.delete_queue(P, Q)
    assert [m.id for m in redis_driver.get_messages(P, OTHER, kept, clock.now_ms())] == kept


def test_big_indexes_are_unlinked_whole_where_the_store_frees_them_in_the_background(
    redis_driver: RedisDriver, clock: FakeClock
) -> None:
    post(redis_driver, clock, MANY)
    ready = redis_driver._keys.queue(P, Q).ready
    assert redis_driver._client.zcard(ready) == MANY

    redis_driver._run("queue", P, Q, "purge", 0, layout.UNLINK_INDEXES)

    assert trash_left(redis_driver) == (MANY // layout.BUCKET_SIZE + 1, {})
    assert redis_driver._client.exists(ready) == 0
    sweep(redis_driver)
    assert queue_keys(redis_driver) == {redis_driver._keys.queue(P, Q).queue}


@pytest.mark.parametrize(("store", "background"), [("embedded", False), ("redis-server", True)])
def test_which_stores_free_in_the_background(
    request: pytest.FixtureRequest, store: str, background: bool
) -> None:
    """The embedded store's build allocates with the C library's malloc, Debian's redis-server
    with jemalloc (what ``INFO memory`` says of each: ``removal.py``)."""
    client = redis.Redis.from_url(store_url(request, store))
    try:
        assert frees_in_background(client) is background
    finally:
        client.close()
