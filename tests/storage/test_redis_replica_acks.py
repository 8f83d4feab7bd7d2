"""``[storage] replica_acks`` on Redis (``storage/redis/acks.py``): a write is answered once
that many replicas hold it, against a real primary and replica."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from testbed.processes import RedisServer, is_gone, online_replicas, process_state, wait_until
from zaqar_delay.conf import Settings, StorageSettings
from zaqar_delay.errors import StorageConfigError, StorageUnavailable, WriteNotReplicated
from zaqar_delay.models import NewMessage
from zaqar_delay.storage.redis.acks import ReplicaAcks
from zaqar_delay.storage.redis.connect import redis_client
from zaqar_delay.storage.redis.driver import RedisDriver
from zaqar_delay.storage.redis.errors import is_transient
from zaqar_delay.storage.redis.script_calls import PooledScript, ScriptConnections
from zaqar_delay.storage.resolve import resolve_store
from zaqar_delay.storage.uri import open_driver

NOW_MS = 1_700_000_000_000
COUNT = "return redis.call('INCR', KEYS[1])"


@pytest.fixture(scope="module")
def primary() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def replica(primary: RedisServer) -> Iterator[RedisServer]:
    server = RedisServer(extra_args=["--replicaof", "127.0.0.1", str(primary.port)]).start()
    wait_until(
        lambda: online_replicas(redis.Redis(port=primary.port)) == 1,
        10,
        "the replica",
    )
    yield server
    server.stop()


def replica_state(replica: RedisServer) -> str:
    assert replica.process is not None
    return process_state(replica.process.pid)


@pytest.fixture
def client(primary: RedisServer, replica: RedisServer) -> Iterator[Any]:
    client = redis_client(primary.url, 5.0)
    yield client
    client.close()


def test_a_write_is_answered_once_the_replica_holds_it(client: Any, replica: RedisServer) -> None:
    key = f"acks:{uuid.uuid4().hex}"
    script = PooledScript(ScriptConnections(client.connection_pool), COUNT, ReplicaAcks(1, 5.0))
    assert script(keys=[key], args=[]) == 1
    assert redis.Redis(port=replica.port).get(key) == b"1", "answered before the replica had it"


def test_too_few_replicas_answer_503_and_the_write_still_happened(client: Any) -> None:
    key = f"acks:{uuid.uuid4().hex}"
    connections = ScriptConnections(client.connection_pool)
    # A second in which the connected replica confirms even on a busy machine (50 ms was
    # sometimes too short under the parallel suite: "0 of the 2").
    script = PooledScript(connections, COUNT, ReplicaAcks(2, 1.0))
    with pytest.raises(WriteNotReplicated, match="1 of the 2 replicas") as refused:
        script(keys=[key], args=[])
    assert "may still have happened" in refused.value.description
    assert client.get(key) == b"1", "the primary made the write"
    # Both replies were read: the connection is in step and serves the next call.
    [connection] = connections._idle
    assert PooledScript(connections, COUNT)(keys=[key], args=[]) == 2
    assert connections._idle == [connection]


def test_a_stopped_replica_makes_the_write_wait_then_answer_503(
    client: Any, replica: RedisServer
) -> None:
    key = f"acks:{uuid.uuid4().hex}"
    script = PooledScript(ScriptConnections(client.connection_pool), COUNT, ReplicaAcks(1, 0.2))
    assert replica.process is not None
    replica.process.send_signal(19)  # SIGSTOP
    try:
        wait_until(lambda: replica_state(replica) == "T", 5, "the stopped replica")
        with pytest.raises(WriteNotReplicated, match="0 of the 1 replicas"):
            script(keys=[key], args=[])
    finally:
        replica.process.send_signal(18)  # SIGCONT
    assert not is_gone(replica.process.pid)
    wait_until(lambda: redis.Redis(port=replica.port).get(key) == b"1", 10, "replication")


def test_the_driver_waits_after_scripts_and_index_writes(client: Any, replica: RedisServer) -> None:
    driver = RedisDriver(client, prefix=f"a{uuid.uuid4().hex[:8]}", acks=ReplicaAcks(1, 5.0))
    copy = redis.Redis(port=replica.port)
    driver.create_queue("p", "q", {}, 1000)
    assert copy.zrange(driver._keys.project_queues("p"), 0, -1) == [b"q"]
    posted = driver.post_messages(
        "p", "q", [NewMessage(body_json="1", ttl_s=60, delay_ms=0)], "c", 1000
    )
    [ref] = posted.ids
    assert copy.hget(driver._keys.queue("p", "q").queue, "seq") == b"1"
    driver.delete_message("p", "q", ref, None, 1001)
    assert driver.stats("p", "q", 1002).total == 0
    starved = RedisDriver(client, prefix=driver._keys.prefix, acks=ReplicaAcks(2, 0.05))
    with pytest.raises(WriteNotReplicated):
        starved.create_queue("p", "other", {}, 1000)
    assert any("replica_acks = 2" in warning for warning in starved.prepare())


def test_many_calls_wait_for_the_replica_once_after_the_last(
    client: Any, replica: RedisServer
) -> None:
    driver = RedisDriver(client, prefix=f"a{uuid.uuid4().hex[:8]}", acks=ReplicaAcks(1, 5.0))
    copy = redis.Redis(port=replica.port)
    driver.put_metadata_many("p", {"a": {"n": 1}, "b": {"n": 2}}, 1000)
    assert copy.hget(driver._keys.queue("p", "b").queue, "m") == b'{"n": 2}'
    assert copy.zrange(driver._keys.project_queues("p"), 0, -1) == [b"a", b"b"]
    starved = RedisDriver(client, prefix=driver._keys.prefix, acks=ReplicaAcks(2, 0.05))
    with pytest.raises(WriteNotReplicated, match="1 of the 2 replicas"):
        starved.put_metadata_many("p", {"a": {"n": 3}, "c": {"n": 4}}, 1000)
    assert driver.get_metadata_many("p", ["a", "c"]) == [{"n": 3}, {"n": 4}], "not written"


def test_the_embedded_store_with_replica_acks_is_refused() -> None:
    with pytest.raises(StorageConfigError, match="the embedded store has none"):
        resolve_store(Settings(storage=StorageSettings(replica_acks=1)))


def test_a_primary_short_of_replicas_for_min_replicas_to_write_answers_503(
    client: Any, primary: RedisServer
) -> None:
    admin = redis.Redis(port=primary.port)
    admin.config_set("min-replicas-to-write", 2)  # one replica is connected
    try:
        script = PooledScript(ScriptConnections(client.connection_pool), COUNT)
        with pytest.raises(redis.ResponseError, match="NOREPLICAS") as refused:
            script(keys=[f"acks:{uuid.uuid4().hex}"], args=[])
        assert is_transient(refused.value), "a refusal for now, not a bug: 503"
        driver = RedisDriver(client, prefix=f"a{uuid.uuid4().hex[:8]}")
        with pytest.raises(StorageUnavailable):
            driver.create_queue("p", "q", {}, 1000)
    finally:
        admin.config_set("min-replicas-to-write", 0)


def test_a_write_sent_to_a_demoted_primary_answers_503_and_drops_the_connection(
    replica: RedisServer,
) -> None:
    # A primary a failover has just demoted: it refuses the script's write (READONLY) and
    # the WAIT behind it ("WAIT cannot be used with replica instances").
    demoted = redis.Redis(port=replica.port)
    assert demoted.info("replication")["role"] == "slave"
    connections = ScriptConnections(redis_client(replica.url, 5.0).connection_pool)
    script = PooledScript(connections, COUNT, ReplicaAcks(1, 1.0))
    # (Redis 6 names the error READONLY in its message; Redis 7 gives it as the reply's code,
    # which redis-py cuts from the message.)
    with pytest.raises(redis.ResponseError, match="read only replica") as refused:
        script(keys=[f"acks:{uuid.uuid4().hex}"], args=[])
    assert is_transient(refused.value), "a refusal for now, not a bug: 503"
    # The connection to it is closed, so the next call connects to the primary of now.
    assert connections._idle == []


def test_wait_refused_at_runtime_is_a_503_that_says_so_and_ends_when_granted_again(
    primary: RedisServer, replica: RedisServer
) -> None:
    """An operator who takes WAIT away from the service's user while it runs (the start
    checks it): every write is still made, and answered 503 "may still have happened", saying
    why; none is a 500, and granting WAIT again ends it."""
    admin = redis.Redis(port=primary.port)
    user = f"acks{uuid.uuid4().hex[:8]}"
    grant = ("resetkeys", "~zd:*", "resetchannels", "&zd:*:wake", "+@all", "-@dangerous")
    admin.execute_command("ACL", "SETUSER", user, "on", f">{user}-pw", *grant)
    uri = f"redis://{user}:{user}-pw@127.0.0.1:{primary.port}/0"
    driver = open_driver(uri, Settings(storage=StorageSettings(uri=uri, replica_acks=1)))
    try:
        queue = f"q{uuid.uuid4().hex[:8]}"
        driver.post_messages("p", queue, [NewMessage('"before"', 600, 0)], "c", NOW_MS)
        admin.execute_command("ACL", "SETUSER", user, "-wait")
        with pytest.raises(WriteNotReplicated, match=r"WAIT.*refused.*permissions.*\+wait"):
            driver.post_messages("p", queue, [NewMessage('"during"', 600, 0)], "c", NOW_MS)
        # The fault: the store refused WAIT, after making the write.
        assert any(e["username"] == user and e["object"] == "wait" for e in admin.acl_log(100))
        assert driver.stats("p", queue, NOW_MS).total == 2
        # A write made by a plain pipeline (the project's queue index) is no 500 either.
        with pytest.raises(WriteNotReplicated, match=r"WAIT.*refused"):
            driver.delete_queue("p", queue)
        admin.execute_command("ACL", "SETUSER", user, "+wait")
        driver.post_messages("p", queue, [NewMessage('"after"', 600, 0)], "c", NOW_MS)
    finally:
        driver.close()
        admin.execute_command("ACL", "DELUSER", user)


def test_a_pop_too_few_replicas_confirmed_still_answers_its_messages(
    client: Any, replica: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A pop removes its messages on the primary, and only its answer delivers them: a 503
    would lose them for good. So it answers them, and warns (a failover that loses the
    removal delivers them again); the other writes still answer 503."""
    driver = RedisDriver(client, prefix=f"a{uuid.uuid4().hex[:8]}", acks=ReplicaAcks(1, 5.0))
    new = [NewMessage(body_json=str(i), ttl_s=60, delay_ms=0) for i in range(3)]
    ids = driver.post_messages("p", "q", new, "c", 1000).ids
    starved = RedisDriver(client, prefix=driver._keys.prefix, acks=ReplicaAcks(2, 0.05))
    with caplog.at_level(logging.WARNING, logger="zaqar_delay.storage.redis.acks"):
        popped = starved.pop_messages("p", "q", 2, 1001)
    # The fault: the replicas did not confirm the pop's removal.
    assert "a pop answered although" in caplog.text and "of the 2 replicas" in caplog.text
    assert [m.id for m in popped] == ids[:2]
    assert [m.id for m in driver.get_messages("p", "q", ids, 1002)] == ids[2:], "not removed"
    with pytest.raises(WriteNotReplicated, match="of the 2 replicas"):
        starved.delete_message("p", "q", ids[2], None, 1002)
