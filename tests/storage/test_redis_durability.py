"""What a Redis store promises is checked when the server starts
(zaqar_delay/storage/redis/durability.py): a store that evicts keys is refused; one without an
append-only file or a replica, or that hides its configuration, is named in a warning."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

import pytest
import redis

from testbed.processes import RedisCluster, RedisSentinelGroup, RedisServer
from tests.helpers.stores import close_test_driver, open_test_driver
from zaqar_delay.conf import Settings, StorageSettings
from zaqar_delay.errors import StorageConfigError
from zaqar_delay.storage.redis import durability
from zaqar_delay.storage.redis.sentinel import sentinel_client
from zaqar_delay.storage.resolve import resolve_store


@pytest.fixture
def started() -> Iterator[list[RedisServer]]:
    servers: list[RedisServer] = []
    yield servers
    for server in servers:
        server.stop()


def start(started: list[RedisServer], *args: str, aof: bool = False) -> RedisServer:
    server = RedisServer(aof=aof, extra_args=list(args)).start()
    started.append(server)
    return server


def test_a_store_that_evicts_any_key_is_refused(started: list[RedisServer]) -> None:
    server = start(started, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru", aof=True)
    config = redis.Redis(port=server.port).config_get("maxmemory*")
    assert config["maxmemory-policy"] == "allkeys-lru" and int(config["maxmemory"]) > 0
    driver = open_test_driver(server.url)
    try:
        with pytest.raises(StorageConfigError, match="maxmemory-policy allkeys-lru"):
            driver.prepare()
    finally:
        close_test_driver(driver)


@pytest.mark.parametrize(
    "args",
    [
        ("--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"),  # messages have no expiry
        ("--maxmemory", "0", "--maxmemory-policy", "allkeys-lru"),  # no limit: never evicts
    ],
)
def test_a_store_that_never_evicts_a_message_is_accepted(
    started: list[RedisServer], args: tuple[str, ...]
) -> None:
    server = start(started, *args, aof=True)
    driver = open_test_driver(server.url)
    try:
        assert driver.prepare() == []
    finally:
        close_test_driver(driver)


def test_a_store_without_append_only_file_or_replica_is_named(
    started: list[RedisServer],
) -> None:
    server = start(started, aof=False)
    assert redis.Redis(port=server.port).info("persistence")["aof_enabled"] == 0
    [warning] = durability.check(redis.Redis(port=server.port))
    assert "neither an append-only file nor a replica" in warning


def test_a_store_that_hides_its_configuration_is_named(started: list[RedisServer]) -> None:
    server = start(started, "--rename-command", "CONFIG", "", aof=True)
    with pytest.raises(redis.ResponseError):
        redis.Redis(port=server.port).config_get("maxmemory")
    [warning] = durability.check(redis.Redis(port=server.port))
    assert "would not show its maxmemory-policy" in warning


def test_every_primary_of_a_cluster_is_read(redis_cluster: RedisCluster) -> None:
    driver = open_test_driver(redis_cluster.url)
    try:
        nodes = durability.nodes_of(driver._client)  # type: ignore[attr-defined]
        assert len(nodes) == 3
        read = [durability.read(name, node) for name, node in nodes]
        assert all(node.policy is not None for node in read)
    finally:
        close_test_driver(driver)


@pytest.mark.parametrize(
    ("aof", "args", "survives"),
    [
        (False, (), ()),
        (True, ("--appendfsync", "everysec"), ()),
        (True, ("--appendfsync", "always"), ("process crash", "power loss")),
    ],
)
def test_one_store_survives_what_its_append_only_file_promises(
    started: list[RedisServer], aof: bool, args: tuple[str, ...], survives: tuple[str, ...]
) -> None:
    server = start(started, *args, aof=aof)
    described = durability.describe(redis.Redis(port=server.port), replica_acks=0)
    assert described.store == "redis"
    [facts] = described.facts.values()
    assert facts["appendonly"] is aof
    assert described.survives == survives


def test_sentinel_with_replica_acks_survives_machine_loss_and_failover(
    redis_sentinel: RedisSentinelGroup,
) -> None:
    client = sentinel_client(redis_sentinel.url(), 5.0)
    try:
        waiting = durability.describe(client, replica_acks=1)
        not_waiting = durability.describe(client, replica_acks=0)
    finally:
        client.close()
    assert waiting.store == "redis-sentinel"
    [facts] = waiting.facts.values()
    assert facts["connected_replicas"] == 2 and facts["appendfsync"] == "everysec"
    assert waiting.survives == ("process crash", "machine loss", "failover")
    assert not_waiting.survives == ()
    assert "not power loss" in waiting.summary()


def test_the_server_says_what_the_embedded_store_survives() -> None:
    resolved = resolve_store(
        Settings(storage=StorageSettings(data_dir=tempfile.mkdtemp(prefix="zd-durable-")))
    )
    try:
        assert resolved.durability is not None
        assert resolved.durability.summary() == (
            "redis store, replica_acks = 0: an acknowledged write survives process crash, "
            "power loss; not machine loss, failover"
        )
    finally:
        resolved.close()


def test_a_cluster_with_replica_acks_survives_failover(
    redis_cluster_with_replicas: RedisCluster,
) -> None:
    driver = open_test_driver(redis_cluster_with_replicas.url)  # replica_acks = 1
    try:
        described = driver.durability()
    finally:
        close_test_driver(driver)
    assert described is not None and described.store == "redis-cluster"
    assert len(described.facts) == 3, "every primary is read"
    assert described.survives == ("process crash", "machine loss", "failover")
