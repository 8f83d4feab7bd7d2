"""Redis-only behaviour: key layout, the compact message buckets, and constants the scripts
share with the drivers."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
import redis.crc

from tests.helpers.stores import opened_redis_driver
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import ClaimTimes, Deletion, NewMessage
from zaqar_delay.storage.redis.driver import RedisDriver
from zaqar_delay.storage.redis.keys import KeySpace


@pytest.mark.parametrize("cluster", [False, True])
@pytest.mark.parametrize("project", ["project/with}odd{chars", "}begins-with-a-brace"])
def test_every_key_of_a_queue_shares_one_hash_tag(project: str, cluster: bool) -> None:
    keys = KeySpace("zd", cluster=cluster).queue(project, "jobs").as_list()
    tags = {key[key.index("{") + 1 : key.index("}")] for key in keys}
    assert len(tags) == 1
    assert len(set(keys)) == len(keys) == 21
    if cluster:
        assert len({redis.crc.key_slot(key.encode()) for key in keys}) == 1
    else:  # a standalone store keeps the keys it always had (on a Cluster no data was kept)
        assert keys[0] == f"zd:{{{project}/jobs}}:q"


# -- the compact message layout ----------------------------------------------------------------

CLIENT = uuid.uuid4().hex


@pytest.fixture(params=["embedded", "redis-server"])
def redis_driver(request: pytest.FixtureRequest) -> Iterator[RedisDriver]:
    yield from opened_redis_driver(request)


def post_many(driver: RedisDriver, clock: FakeClock, count: int, ttl: int = 3600) -> list[str]:
    messages = [NewMessage(json.dumps({"n": n, "event": "reminder"}), ttl, 0) for n in range(count)]
    return driver.post_messages("p", "q", messages, CLIENT, clock.now_ms()).ids


def bucket_keys(driver: RedisDriver) -> list[str]:
    keys = driver._keys.queue("p", "q")
    found = driver._client.keys(f"{keys.records}:*") + driver._client.keys(f"{keys.bodies}:*")
    return sorted(k.decode() for k in found)


def test_messages_are_kept_in_compact_buckets_of_128(
    redis_driver: RedisDriver, clock: FakeClock
) -> None:
    post_many(redis_driver, clock, 300)
    keys = bucket_keys(redis_driver)
    # Sequence numbers 1..300 fall in buckets 0, 1 and 2: a bodies and a records hash each.
    assert len(keys) == 6
    encodings = {redis_driver._client.object("encoding", key) for key in keys}
    assert encodings <= {b"ziplist", b"listpack"}


def test_a_record_holds_hops_in_one_byte_only_when_a_message_has_some(
    redis_driver: RedisDriver, clock: FakeClock
) -> None:
    """A message a client posted keeps the record it always had; one that came through
    pushes a byte more, so both stay compact (under hash-max-listpack-value, 64)."""
    messages = [NewMessage('"a"', 3600, 0), NewMessage('"b"', 3600, 0, hops=3)]
    redis_driver.post_messages("p", "q", messages, CLIENT, clock.now_ms())
    keys = redis_driver._keys.queue("p", "q")
    plain, forwarded = redis_driver._client.hmget(f"{keys.records}:0", ["1", "2"])
    assert plain is not None and forwarded is not None
    assert len(forwarded) == len(plain) + 1 <= 64
    assert redis_driver._client.object("encoding", f"{keys.records}:0") in {b"ziplist", b"listpack"}


def test_a_bucket_emptied_by_deletes_leaves_no_key_or_index_entry(
    redis_driver: RedisDriver, clock: FakeClock
) -> None:
    ids = post_many(redis_driver, clock, 200)
    redis_driver.delete_messages("p", "q", Deletion(ids[:150]), clock.now_ms())
    assert len(bucket_keys(redis_driver)) == 2  # bucket 1 (sequence numbers 128..200) stays
    redis_driver.delete_messages("p", "q", Deletion(ids[150:]), clock.now_ms())
    keys = redis_driver._keys.queue("p", "q")
    assert bucket_keys(redis_driver) == []
    assert redis_driver._client.exists(keys.buckets, keys.expiry, keys.ready) == 0
    assert redis_driver.stats("p", "q", clock.now_ms()).total == 0


def test_expired_buckets_are_collected_and_never_counted(
    redis_driver: RedisDriver, clock: FakeClock
) -> None:
    post_many(redis_driver, clock, 200, ttl=60)
    clock.advance(30)
    kept = post_many(redis_driver, clock, 3, ttl=3600)
    clock.advance(31)
    stats = redis_driver.stats("p", "q", clock.now_ms())
    assert stats.expired == 200
    assert stats.total == 3
    assert stats.oldest is not None and stats.oldest.id == kept[0]
    # Only the bucket holding the three live messages is left.
    assert len(bucket_keys(redis_driver)) == 2


@pytest.mark.parametrize(
    "client",
    [
        "5c0f5e0a9b2d4e7f8a1b3c5d7e9f0a2b",
        "5c0f5e0a-9b2d-4e7f-8a1b-3c5d7e9f0a2b",
        "a-free-form-client",
        "ABCDEF" * 6,
    ],
)
def test_every_form_of_client_id_reads_back_as_posted(
    redis_driver: RedisDriver, clock: FakeClock, client: str
) -> None:
    [message_id] = redis_driver.post_messages(
        "p", "q", [NewMessage('"x"', 60, 0)], client, clock.now_ms()
    ).ids
    [message] = redis_driver.get_messages("p", "q", [message_id], clock.now_ms())
    assert message.client_id == client


# -- moving a store from the layout before buckets ---------------------------------------------


def write_legacy_message(
    driver: RedisDriver,
    message_id: str,
    seq: int,
    body: Any,
    now_ms: int,
    due_ms: int,
    claim: tuple[str, int] | None = None,
) -> None:
    """A message as the scripts before buckets stored it (one entry in each of six keys)."""
    bodies, infos, fifo, ready, claimed, expiry = driver._keys.legacy_queue("p", "q")
    expires = now_ms + 3_600_000
    cid, claim_expires = claim or ("", 0)
    info = [now_ms, expires, 3600, due_ms, CLIENT, seq, cid, claim_expires, 1 if claim else 0]
    client = driver._client
    client.hset(bodies, message_id, json.dumps(body))
    client.hset(infos, message_id, msgpack.packb(info))
    client.zadd(fifo, {message_id: seq})
    client.zadd(expiry, {message_id: expires})
    if claim:
        client.zadd(claimed, {message_id: claim_expires})
    else:
        client.zadd(ready, {message_id: due_ms})


@pytest.fixture(params=["embedded", "redis-cluster"])
def any_redis_driver(request: pytest.FixtureRequest) -> Iterator[RedisDriver]:
    yield from opened_redis_driver(request)


def test_a_store_in_the_layout_before_buckets_is_moved_into_them_on_start(
    any_redis_driver: RedisDriver, clock: FakeClock
) -> None:
    driver, now = any_redis_driver, clock.now_ms()
    keys = driver._keys.queue("p", "q")
    driver._client.hset(keys.queue, mapping={"m": "{}", "cr": now, "seq": 3})
    delayed, claimed = f"{1:016x}{'ab' * 8}", f"{2:016x}{'cd' * 8}"
    moved_in = f"{99:016x}{'ef' * 8}"  # kept its id from a dead-letter move
    cid, claim_expires = "c" * 32, now + 300_000
    write_legacy_message(driver, delayed, 1, {"n": 1}, now, now + 60_000)
    write_legacy_message(driver, claimed, 2, {"n": 2}, now, now, claim=(cid, claim_expires))
    write_legacy_message(driver, moved_in, 3, {"n": 3}, now, now)
    driver._client.hset(keys.claims, cid, msgpack.packb([300, 60, now, claim_expires, claimed]))
    driver._client.zadd(keys.claim_expiry, {cid: claim_expires})
    assert driver.get_messages("p", "q", [delayed], now) == []  # the scripts read buckets only

    moved = "moved the messages of 1 queue(s) into the bucket layout"
    assert moved in driver.prepare()  # beside what the store's durability check says

    assert driver._client.exists(*driver._keys.legacy_queue("p", "q")) == 0
    found = {m.id: m for m in driver.get_messages("p", "q", [delayed, claimed, moved_in], now)}
    assert {i: m.body for i, m in found.items()} == {
        delayed: {"n": 1},
        claimed: {"n": 2},
        moved_in: {"n": 3},
    }
    assert found[delayed].due_ms == now + 60_000
    assert found[claimed].claim_id == cid and found[claimed].claim_count == 1
    assert {m.client_id for m in found.values()} == {CLIENT}
    assert [m.id for m in driver.get_claim("p", "q", cid, now).messages] == [claimed]
    stats = driver.stats("p", "q", now)
    assert (stats.total, stats.claimed, stats.delayed) == (3, 1, 1)
    outcome = driver.create_claim("p", "q", ClaimTimes(60, 60), 10, now)
    assert outcome is not None and [m.id for m in outcome.messages] == [moved_in]
    assert moved not in driver.prepare()  # recorded: later starts do not scan


def test_a_post_wakes_waiters_only_when_it_moves_the_next_due_time(
    redis_driver: RedisDriver, clock: FakeClock
) -> None:
    keys = redis_driver._keys.queue("p", "q")
    redis_driver._client.set(keys.waiters, 1, px=60_000)  # a server holds waiting claims here
    pubsub = redis_driver._client.pubsub()
    pubsub.subscribe(keys.wake)
    assert pubsub.get_message(timeout=1) is not None  # the subscription's confirmation

    def wake_ups_after_posting(delay_ms: int) -> int:
        message = NewMessage(json.dumps({"delay": delay_ms}), 3600, delay_ms)
        redis_driver.post_messages("p", "q", [message], CLIENT, clock.now_ms())
        count = 0
        while pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2) is not None:
            count += 1
        return count

    try:
        assert wake_ups_after_posting(5000) == 1  # nothing else is due: waiters must look
        assert wake_ups_after_posting(9000) == 0  # they wake for the first one before this
        assert wake_ups_after_posting(5000) == 0  # and claim both then
        assert wake_ups_after_posting(2000) == 1  # due sooner than they would wake
        assert wake_ups_after_posting(0) == 1  # claimable now
        assert wake_ups_after_posting(0) == 1  # each one claimable now
        redis_driver._client.delete(keys.waiters)
        assert wake_ups_after_posting(0) == 0  # nobody waits
    finally:
        pubsub.close()
