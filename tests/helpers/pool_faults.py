"""A pool whose store stops once queues are placed on it, for the tests of what a pooled
service does while one pool is away."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest
import redis

from testbed.processes import RedisServer, wait_gone
from tests.helpers.api import Api


@contextlib.contextmanager
def placed_on_a_stopped_pool(api: Api, place: Callable[[], None]) -> Iterator[None]:
    """Register a pool "gone" on a redis-server of its own, which takes every new queue while
    ``place`` runs (the pooled API's "redis" and "mongo" weigh 0 meanwhile); then let "redis"
    take new queues, stop the server and check that it refuses connections."""
    server = RedisServer().start()
    try:
        created = api.put("/v2/pools/gone", json={"uri": server.url, "weight": 100})
        assert created.status_code == 201, created.text
        for pool in ("redis", "mongo"):
            assert api.patch(f"/v2/pools/{pool}", json={"weight": 0}).status_code == 200
        place()
        assert api.patch("/v2/pools/redis", json={"weight": 100}).status_code == 200
        assert api.patch("/v2/pools/gone", json={"weight": 0}).status_code == 200
        assert server.process is not None
        pid = server.process.pid
        server.stop()
        wait_gone([pid])
        with pytest.raises(redis.ConnectionError):  # the fault happened
            redis.Redis(port=server.port, socket_timeout=1).ping()
        yield
    finally:
        server.stop()
