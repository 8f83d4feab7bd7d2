"""Redis Cluster specifics: the URI, queues spread over masters, a cluster that starts late."""

from __future__ import annotations

import pytest
import redis

from testbed.processes import RedisCluster
from tests.helpers.stores import close_test_driver, open_test_driver
from zaqar_delay.clock import FakeClock
from zaqar_delay.errors import StorageConfigError, StorageUnavailable
from zaqar_delay.models import ClaimTimes, NewMessage
from zaqar_delay.storage.redis.cluster import parse_cluster_uri
from zaqar_delay.storage.redis.driver import RedisDriver


def test_cluster_uri_lists_nodes_and_credentials() -> None:
    nodes, options = parse_cluster_uri("rediss+cluster://app:s%40cret@10.0.0.1:7000,[::1]:7001")
    assert [(n.host, n.port) for n in nodes] == [("10.0.0.1", 7000), ("::1", 7001)]
    assert options == {"ssl": True, "username": "app", "password": "s@cret"}
    _, plain = parse_cluster_uri("redis+cluster://127.0.0.1:7000")
    assert plain == {"ssl": False}


@pytest.mark.parametrize(
    "uri", ["redis+cluster://", "redis+cluster://host", "redis+cluster://host:port"]
)
def test_cluster_uri_without_a_usable_node_is_refused(uri: str) -> None:
    with pytest.raises(StorageConfigError):
        parse_cluster_uri(uri)


def test_queues_spread_over_every_master(redis_cluster: RedisCluster, clock: FakeClock) -> None:
    driver = open_test_driver(redis_cluster.url)
    try:
        for i in range(60):
            driver.post_messages("p", f"q{i}", [NewMessage('"x"', 60, 0)], "c", clock.now_ms())
        holding = [redis.Redis(port=node.port).dbsize() > 0 for node in redis_cluster.nodes]
        assert all(holding)
        claim = driver.create_claim("p", "q59", ClaimTimes(30, 30), 5, clock.now_ms())
        assert claim is not None and len(claim.messages) == 1
    finally:
        close_test_driver(driver)


def test_a_cluster_down_at_start_answers_unavailable_then_serves(clock: FakeClock) -> None:
    cluster = RedisCluster()
    driver = open_test_driver(cluster.url)  # nothing listens yet: building must not fail
    try:
        assert not driver.ping()
        with pytest.raises(StorageUnavailable):
            driver.post_messages("p", "q", [NewMessage('"x"', 60, 0)], "c", clock.now_ms())
        cluster.start()
        [mid] = driver.post_messages("p", "q", [NewMessage('"x"', 60, 0)], "c", clock.now_ms()).ids
        assert [m.id for m in driver.get_messages("p", "q", [mid], clock.now_ms())] == [mid]
    finally:
        close_test_driver(driver)
        cluster.stop()


def test_with_replica_acks_a_write_goes_to_its_shard_and_waits_for_its_replica(
    redis_cluster_with_replicas: RedisCluster, clock: FakeClock
) -> None:
    driver = open_test_driver(redis_cluster_with_replicas.url)  # replica_acks = 1
    assert isinstance(driver, RedisDriver)
    try:
        [mid] = driver.post_messages("p", "q", [NewMessage('"x"', 60, 0)], "c", clock.now_ms()).ids
        queue_key = driver._keys.queue("p", "q").queue
        primary = driver._client.get_node_from_key(queue_key)
        [replica] = [
            node
            for node in redis_cluster_with_replicas.nodes
            if redis.Redis(port=node.port).info("replication").get("master_port") == primary.port
        ]
        copy = redis.Redis(port=replica.port)
        copy.execute_command("READONLY")
        assert copy.hget(queue_key, "seq") == b"1", "answered before the replica had it"
        assert [m.id for m in driver.get_messages("p", "q", [mid], clock.now_ms())] == [mid]
    finally:
        close_test_driver(driver)


def test_a_script_sent_to_a_former_owner_of_its_slot_is_sent_again_to_the_owner(
    redis_cluster_with_replicas: RedisCluster, clock: FakeClock
) -> None:
    driver = open_test_driver(redis_cluster_with_replicas.url)
    assert isinstance(driver, RedisDriver)
    try:
        driver.create_queue("p", "moved", {}, clock.now_ms())
        cluster = driver._client._cluster()
        queue_key = driver._keys.queue("p", "moved").queue
        slot = cluster.keyslot(queue_key)
        owner = cluster.nodes_manager.slots_cache[slot][0]
        other = next(node for node in cluster.get_primaries() if node.name != owner.name)
        cluster.nodes_manager.slots_cache[slot] = [other]  # as if the slot had moved since
        assert driver._client.get_node_from_key(queue_key).name == other.name
        posted = driver.post_messages("p", "moved", [NewMessage('"x"', 60, 0)], "c", clock.now_ms())
        assert len(posted.ids) == 1
        assert driver._client.get_node_from_key(queue_key).name == owner.name, "map read again"
        assert driver.stats("p", "moved", clock.now_ms()).total == 1, "the post ran once"
    finally:
        close_test_driver(driver)
