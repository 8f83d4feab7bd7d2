"""What a Redis store promises is checked when the server starts
(zaqar_delay/storage/redis/durability.py): a store that evicts keys is refused; one without an
append-only file or a replica, or that hides its configuration, is named in a warning."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.conftest import close_test_driver, open_test_driver
from tests.processes import RedisCluster, RedisServer
from zaqar_delay.errors import StorageConfigError
from zaqar_delay.storage.redis import durability


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
