"""The stores every suite runs on, and drivers on a namespace of their own."""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.processes import SecantusServer
from zaqar_delay.models import ListQuery, Message
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.mongodb.connect import mongo_client
from zaqar_delay.storage.mongodb.driver import MongoDriver
from zaqar_delay.storage.redis.acks import ReplicaAcks
from zaqar_delay.storage.redis.cluster import LazyClusterClient
from zaqar_delay.storage.redis.connect import redis_client
from zaqar_delay.storage.redis.driver import RedisDriver
from zaqar_delay.storage.redis.sentinel import is_sentinel_uri, sentinel_client
from zaqar_delay.storage.swift.access import access_from_uri
from zaqar_delay.storage.swift.connect import SwiftClient
from zaqar_delay.storage.swift.driver import SwiftDriver

REAL_MONGODB_ENV = "ZAQAR_DELAY_TEST_MONGODB_URL"

# The replicas of the redis-sentinel store (testbed.processes.RedisSentinelGroup's default).
SENTINEL_REPLICAS = 2
# settle_ms of the in-process Swift drivers of tests that race writers on one store (marked
# ``racing``, and the API suite's), unless their URI names one. The driver's default (100 ms)
# is for object servers on storage nodes of their own; these tests race up to eight threads
# on one all-in-one that shares two cores with a parallel test run, and at 100 ms two
# concurrent creations of a dedup generation both won now and then. A test without
# concurrent writers waits for the default: the settle cannot change what it sees.
RACING_SETTLE_MS = 300


# Every store the contract suite runs on.
# redis-sentinel: a primary with two replicas behind three Sentinels; its drivers wait for both
# replicas after every write ([storage] replica_acks = 2).
# redis-cluster-acks: three masters with a replica each; its drivers wait for the replica of
# the shard written after every write ([storage] replica_acks = 1).
STORES = [
    "embedded",
    "redis-server",
    "redis-sentinel",
    "redis-cluster",
    "redis-cluster-acks",
    "mongodb",
]
if os.environ.get(REAL_MONGODB_ENV):
    STORES.append("mongodb-real")

# Cluster URIs whose test drivers wait for one replica per write.
ACKED_CLUSTERS: set[str] = set()


def store_url(request: pytest.FixtureRequest, store: str) -> str:
    """The URI of a running store of kind ``store``."""
    if store == "embedded":
        return str(request.getfixturevalue("embedded_redis").uri)
    if store == "redis-server":
        return str(request.getfixturevalue("redis_server").url)
    if store == "redis-sentinel":
        return str(request.getfixturevalue("redis_sentinel").url())
    if store == "redis-cluster":
        return str(request.getfixturevalue("redis_cluster").url)
    if store == "redis-cluster-acks":
        return str(request.getfixturevalue("redis_cluster_with_replicas").url)
    if store == "mongodb":
        return str(request.getfixturevalue("secantus_server").url)
    if store == "swift":
        return str(request.getfixturevalue("swift_aio").store_uri)
    return os.environ[REAL_MONGODB_ENV]


def secantus_of_its_own() -> Iterator[SecantusServer]:
    """A secantusdb for one suite's session (its conftest's ``secantus_server``).

    secantusdb is a test-only server. The functional suite saw it stuck after servers were
    stopped with requests and change streams open; the storage suite, while it shared one
    with the API and pipeline suites, saw it hold its storage lock for minutes (the
    contract's 5,000-message post timed out after 30 s), which of their operations left it
    so was not found. The storage suite's instance serves only the drivers its own fixtures
    open and close; the API, pipeline and functional suites, which run servers and wake-up
    listeners on MongoDB, each have theirs."""
    server = SecantusServer().start()
    yield server
    server.stop()


def races(request: pytest.FixtureRequest) -> bool:
    """Whether the test races writers on one store (its ``racing`` marker)."""
    return request.node.get_closest_marker("racing") is not None


def open_test_driver(
    uri: str, list_scan_budget: int = 2000, namespace: str | None = None, racing: bool = False
) -> Driver:
    """A driver on a namespace of its own (key prefix or database), indexes in place;
    ``racing``: its test races writers on the store (Swift then settles longer)."""
    namespace = namespace or f"t{uuid.uuid4().hex[:12]}"
    if uri.startswith("swift"):
        access = access_from_uri(uri)
        if racing and "settle_ms=" not in uri:
            access = dataclasses.replace(access, settle_ms=RACING_SETTLE_MS)
        swift = SwiftDriver(SwiftClient(access), namespace, list_scan_budget=list_scan_budget)
        swift.prepare()
        return swift
    if uri.startswith("mongodb"):
        # secantusdb is a Python server: a large batch on a busy machine takes seconds.
        client, _ = mongo_client(uri, 30.0)
        driver: Driver = MongoDriver(client, namespace, list_scan_budget=list_scan_budget)
        driver.prepare()
        return driver
    if is_sentinel_uri(uri):
        return RedisDriver(
            sentinel_client(uri, 5.0),
            prefix=namespace,
            list_scan_budget=list_scan_budget,
            acks=ReplicaAcks(SENTINEL_REPLICAS, 5.0),
        )
    client = LazyClusterClient(uri, 5.0, 64) if uri.startswith("redis+cluster") else None
    return RedisDriver(
        client or redis_client(uri, 5.0),
        prefix=namespace,
        list_scan_budget=list_scan_budget,
        acks=ReplicaAcks(1, 5.0) if uri in ACKED_CLUSTERS else None,
    )


def namespace_of(driver: Driver) -> str:
    """What to pass to open_test_driver to reach the same data from another process."""
    if isinstance(driver, MongoDriver):
        return str(driver._db.name)
    if isinstance(driver, SwiftDriver):
        return driver._namespace
    assert isinstance(driver, RedisDriver)
    return driver._keys.prefix


def redis_values_text(client: Any, match: str = "*") -> str:
    """Every string and hash value of the keys ``match`` names, as text: what a reader of the
    store's memory or files would see."""
    parts = []
    for key in client.scan_iter(match=match):
        kind = client.type(key)
        if kind == b"hash":
            parts += [repr(value) for value in client.hgetall(key).values()]
        elif kind == b"string":
            parts.append(repr(client.get(key)))
    return "\n".join(parts)


def close_test_driver(driver: Driver) -> None:
    if isinstance(driver, MongoDriver):
        driver._client.drop_database(driver._db.name)
    driver.close()


def every_message(driver: Driver, project: str, queue: str, now_ms: int) -> list[Message]:
    """The first page (10) of a queue's messages, claimed and delayed ones included."""
    return list(
        driver.list_messages(
            project,
            queue,
            ListQuery(
                marker=None,
                limit=10,
                client_id="",
                echo=True,
                include_claimed=True,
                include_delayed=True,
            ),
            now_ms,
        ).messages
    )


def opened_redis_driver(request: pytest.FixtureRequest) -> Iterator[RedisDriver]:
    """A Redis driver on the store ``request.param`` names (a fixture's parameter), closed
    after the test."""
    driver = open_test_driver(store_url(request, request.param))
    assert isinstance(driver, RedisDriver)
    yield driver
    driver.close()
