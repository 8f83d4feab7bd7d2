"""A Redis user of the service's own, granted as the running manual says: the keys and wake
channels under its key prefix, every command but ``@dangerous`` (so neither ``INFO`` nor
``CONFIG``), on a standalone store, behind Sentinel and on a Cluster. Everything the service does works; what it could not read about the store it
says it could not, and a wake channel the user may not subscribe to is told once."""

from __future__ import annotations

import dataclasses
import logging
import threading
import uuid
from collections.abc import Iterator

import pytest
import redis

from testbed.processes import RedisCluster, RedisSentinelGroup, RedisServer
from zaqar_delay.conf import Settings
from zaqar_delay.errors import StorageConfigError, StorageUnavailable
from zaqar_delay.models import ClaimTimes, Deletion, LeaseRequest, NewMessage, NewSubscription
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.uri import open_driver

NOW = 1_700_000_000_000
# The grant of doc/source/manual/running.rst for the default key prefix, zd.
GRANT = ("resetkeys", "~zd:*", "resetchannels", "&zd:*:wake", "+@all", "-@dangerous")


@pytest.fixture(scope="module")
def store() -> Iterator[RedisServer]:
    server = RedisServer().start()
    admin = server.client(5.0)
    admin.execute_command("ACL", "SETUSER", "zaqar", "on", ">zaqar-pw", *GRANT)
    # The same, but for the wake channels of another prefix only.
    other = [g if g != "&zd:*:wake" else "&other:*:wake" for g in GRANT]
    admin.execute_command("ACL", "SETUSER", "deaf", "on", ">deaf-pw", *other)
    yield server
    server.stop()


@dataclasses.dataclass
class Granted:
    """A store whose data nodes each have the user ``zaqar`` granted ``GRANT``: the URI
    naming that user, and an administrator's client of each data node."""

    uri: str
    nodes: list[redis.Redis]


@pytest.fixture(params=["standalone", "sentinel", "cluster"])
def granted(request: pytest.FixtureRequest, store: RedisServer) -> Iterator[Granted]:
    if request.param == "standalone":
        yield Granted(f"redis://zaqar:zaqar-pw@127.0.0.1:{store.port}/0", [store.client(5.0)])
        return
    if request.param == "sentinel":
        group = RedisSentinelGroup(replicas=1).start()
        nodes = [node.client(5.0) for node in group.data_nodes]
        uri = group.url().replace("redis://", "redis://zaqar:zaqar-pw@", 1)
        stop = group.stop
    else:
        cluster = RedisCluster().start()
        nodes = [redis.Redis(port=node.port) for node in cluster.nodes]
        uri = cluster.url.replace("redis+cluster://", "redis+cluster://zaqar:zaqar-pw@", 1)
        stop = cluster.stop
    try:
        for node in nodes:  # a replica promoted later must know the user too
            node.execute_command("ACL", "SETUSER", "zaqar", "on", ">zaqar-pw", *GRANT)
        yield Granted(uri, nodes)
    finally:
        stop()


def user_driver(store: RedisServer, user: str) -> Driver:
    return open_driver(f"redis://{user}:{user}-pw@127.0.0.1:{store.port}/0", Settings())


def refusals_of(node: redis.Redis, user: str) -> set[str]:
    """What the data node's ACL log says ``user`` was refused."""
    return {str(e["object"]) for e in node.acl_log(100) if e["username"] == user}


def test_a_user_granted_as_the_manual_says_serves_every_operation(granted: Granted) -> None:
    user = redis.Redis(
        port=granted.nodes[0].connection_pool.connection_kwargs["port"],
        username="zaqar",
        password="zaqar-pw",
    )
    with pytest.raises(redis.exceptions.NoPermissionError):
        user.info()  # the store keeps its persistence and replicas from this user
    driver = open_driver(granted.uri, Settings())
    wakeups = driver.wakeups()
    assert wakeups is not None
    woken: list[str] = []
    listening, stop = threading.Event(), threading.Event()
    listener = threading.Thread(target=wakeups.listen, args=(woken.append, listening.set, stop))
    listener.start()
    try:
        warnings = driver.prepare()
        [unread] = [w for w in warnings if "persistence and replicas (INFO refused)" in w]
        if granted.uri.startswith("redis+cluster://"):  # each primary, named once
            assert unread.startswith("the Redis primaries 127.0.0.1:")
            assert " and 127.0.0.1:" in unread and "would not show their persistence" in unread
        else:
            assert unread.startswith("the Redis store would not show its persistence")
        assert driver.durability() is None, "it cannot tell what a write survives"

        project, queue = "p", f"q{uuid.uuid4().hex[:8]}"
        driver.create_queue(project, queue, {}, NOW)
        assert listening.wait(10)
        wakeups.announce(project, queue, 10_000)
        subscription = NewSubscription("http://127.0.0.1:9/h", 3600, {}, "s")
        driver.create_subscription(project, queue, subscription, NOW)
        driver.post_messages(project, queue, [NewMessage('"acl"', 600, 0)], "c", NOW)
        claim = driver.claim(project, queue, ClaimTimes(60, 60), 10, NOW).claim
        assert claim is not None and [m.body for m in claim.messages] == ["acl"]
        assert (project, queue) in driver.due_push_queues(NOW, 100)
        assert len(driver.lease_pushes(project, queue, LeaseRequest(NOW, 30_000, 10))) == 1
        driver.delete_messages(project, queue, Deletion([claim.messages[0].id], [claim.id]), NOW)
        assert driver.stats(project, queue, NOW).total == 0
        assert queue in [q.name for q in driver.list_queues(project, None, 100, False)]
        driver.delete_queue(project, queue)
        for _ in range(100):
            if woken:
                break
            stop.wait(0.1)
        assert woken == [wakeups.channel(project, queue)], "the post's wake-up was not heard"
    finally:
        stop.set()
        listener.join(10)
        driver.close()
    # INFO and CONFIG GET (Redis 6 logs "config"), which the durability check reads, are all
    # it was refused, on any node.
    refused = set().union(*(refusals_of(node, "zaqar") for node in granted.nodes))
    assert refused <= {"info", "config|get", "config"}


def test_a_user_refused_the_wake_channel_is_told_once_and_retried_each_second(
    store: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    driver = user_driver(store, "deaf")
    wakeups = driver.wakeups()
    assert wakeups is not None
    tries: list[None] = []
    stop = threading.Event()
    listener = threading.Thread(
        target=wakeups.listen, args=(lambda channel: None, lambda: tries.append(None), stop)
    )
    with caplog.at_level(logging.WARNING, logger="zaqar_delay.storage.redis.wakeups"):
        listener.start()
        try:
            for _ in range(100):
                if len(tries) >= 3:
                    break
                stop.wait(0.1)
        finally:
            stop.set()
            listener.join(10)
            driver.close()
    assert "zd:*:wake" in refusals_of(store.client(5.0), "deaf"), "the channel was not refused"
    # Each try wakes the waiting claims to look (on_reconnect), and the refusal is told once.
    assert len(tries) >= 3
    told = [r for r in caplog.records if r.name == "zaqar_delay.storage.redis.wakeups"]
    assert [r.levelno for r in told] == [logging.ERROR]
    assert "ACL SETUSER <user> &zd:*:wake" in told[0].getMessage()


def test_replica_acks_with_a_user_refused_wait_stop_the_start(store: RedisServer) -> None:
    without_wait = [*GRANT, "-wait"]
    store.client(5.0).execute_command("ACL", "SETUSER", "nowait", "on", ">nowait-pw", *without_wait)
    uri = f"redis://nowait:nowait-pw@127.0.0.1:{store.port}/0"
    acked = Settings()
    acked = dataclasses.replace(acked, storage=dataclasses.replace(acked.storage, replica_acks=1))
    # The fault: the store keeps each write, and answers the WAIT after it with a refusal.
    driver = open_driver(uri, acked)
    try:
        with pytest.raises(StorageUnavailable, match="may still have happened"):
            driver.post_messages("p", "nowait", [NewMessage('"x"', 600, 0)], "c", NOW)
        assert driver.stats("p", "nowait", NOW).total == 1
        assert "wait" in refusals_of(store.client(5.0), "nowait")
        with pytest.raises(StorageConfigError, match=r"replica_acks = 1 needs WAIT.*\+wait"):
            driver.prepare()
    finally:
        driver.close()
    plain = open_driver(uri, Settings())  # without replica acks nothing needs WAIT
    try:
        plain.prepare()
    finally:
        plain.close()
