"""Shared fixtures: real stores (embedded Redis, a redis-server and secantusdb on loopback,
a real MongoDB when ZAQAR_DELAY_TEST_MONGODB_URL is set) and a fake clock. The servers come
from ``testbed``, the helpers that reach them from ``tests.helpers``."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

from testbed.processes import RedisCluster, RedisSentinelGroup, RedisServer, SecantusServer
from testbed.swift_aio import SwiftAllInOne, missing_binaries
from tests.helpers.stores import (
    ACKED_CLUSTERS,
    STORES,
    close_test_driver,
    open_test_driver,
    races,
    store_url,
)
from zaqar_delay.clock import FakeClock
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.redis.embedded import EmbeddedRedis, shut_down

# Tests with one of these markers are slow legs: tox -e slow runs them, tox -e fast leaves them.
SLOW_MARKERS = ("faults", "fuzz", "spark", "benchmark", "wallclock")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith("tests/pipeline/"):
            item.add_marker(pytest.mark.spark)
        if any(item.get_closest_marker(name) for name in SLOW_MARKERS):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def embedded_redis() -> Iterator[EmbeddedRedis]:
    directory = tempfile.mkdtemp(prefix="zd-embedded-")
    server = EmbeddedRedis(os.path.join(directory, "test.db"))
    yield server
    # Whoever is still connected: close() alone would wait for test clients to leave.
    shut_down(server.directory, shared_grace_s=None)
    server.close()  # collects the exited redis-server


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    cluster = RedisCluster().start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[RedisSentinelGroup]:
    group = RedisSentinelGroup().start()
    yield group
    group.stop()


@pytest.fixture(scope="session")
def redis_cluster_with_replicas() -> Iterator[RedisCluster]:
    cluster = RedisCluster(masters=3, replicas=1).start()
    ACKED_CLUSTERS.add(cluster.url)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def secantus_server() -> Iterator[SecantusServer]:
    server = SecantusServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def swift_aio() -> Iterator[SwiftAllInOne]:
    missing = missing_binaries()
    if missing:
        pytest.skip(
            f"Swift's servers are needed ({', '.join(missing)} missing; .ci/run installs them)"
        )
    aio = SwiftAllInOne().start()
    yield aio
    aio.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=STORES)
def store_uri(request: pytest.FixtureRequest) -> str:
    return store_url(request, request.param)


@pytest.fixture
def driver(request: pytest.FixtureRequest, store_uri: str) -> Iterator[Driver]:
    """A driver whose data no other test sees."""
    driver = open_test_driver(store_uri, racing=races(request))
    yield driver
    close_test_driver(driver)
