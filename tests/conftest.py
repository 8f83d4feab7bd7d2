"""Shared fixtures: real stores (embedded Redis, a redis-server on loopback), a fake clock."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator

import pytest

from tests.processes import RedisServer
from zaqar_delay.clock import FakeClock
from zaqar_delay.storage.redis.connect import redis_client
from zaqar_delay.storage.redis.driver import RedisDriver
from zaqar_delay.storage.redis.embedded import EmbeddedRedis

# Every store the contract suite runs on. New drivers add their name here and a branch below.
STORES = ["embedded", "redis-server"]


@pytest.fixture(scope="session")
def embedded_redis() -> Iterator[EmbeddedRedis]:
    directory = tempfile.mkdtemp(prefix="zd-embedded-")
    server = EmbeddedRedis(os.path.join(directory, "test.db"))
    yield server
    server.close()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=STORES)
def store_uri(request: pytest.FixtureRequest) -> str:
    if request.param == "embedded":
        return str(request.getfixturevalue("embedded_redis").uri)
    return str(request.getfixturevalue("redis_server").url)


@pytest.fixture
def driver(store_uri: str) -> Iterator[RedisDriver]:
    """A driver on a key prefix of its own, so tests never see each other's data."""
    driver = RedisDriver(redis_client(store_uri, 5.0), prefix=f"t{uuid.uuid4().hex[:12]}")
    yield driver
    driver.close()
