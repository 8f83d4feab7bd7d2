"""Redis Cluster specifics: the URI, queues spread over masters, a cluster that starts late,
any project id, writes in order across nodes."""

from __future__ import annotations

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
import redis.cluster
import redis.crc

from testbed.processes import RedisCluster
from tests.helpers.stores import close_test_driver, open_test_driver
from zaqar_delay.clock import FakeClock
from zaqar_delay.errors import StorageConfigError, StorageUnavailable
from zaqar_delay.models import ClaimTimes, LeaseRequest, NewMessage, NewSubscription
from zaqar_delay.storage.redis.cluster import parse_cluster_uri
from zaqar_delay.storage.redis.driver import RedisDriver
from zaqar_delay.storage.redis.keys import KeySpace
from zaqar_delay.storage.redis.pushes import queue_member


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


def queue_slot(
    driver: RedisDriver, queue: str, clock: FakeClock
) -> tuple[redis.cluster.RedisCluster, str, int]:
    """The driver's cluster client, and the key and slot of ``queue`` (of project "p"), made."""
    driver.create_queue("p", queue, {}, clock.now_ms())
    cluster = driver._client._cluster()
    queue_key = driver._keys.queue("p", queue).queue
    return cluster, queue_key, cluster.keyslot(queue_key)


def test_a_script_sent_to_a_former_owner_of_its_slot_is_sent_again_to_the_owner(
    redis_cluster_with_replicas: RedisCluster, clock: FakeClock
) -> None:
    driver = open_test_driver(redis_cluster_with_replicas.url)
    assert isinstance(driver, RedisDriver)
    try:
        cluster, queue_key, slot = queue_slot(driver, "moved", clock)
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


@pytest.mark.parametrize("project", ["}x", "}", "}{}/q"])
def test_a_project_whose_id_begins_with_a_closing_brace_is_served(
    redis_cluster: RedisCluster, clock: FakeClock, project: str
) -> None:
    # The fault: tagged "{<project>/<queue>}", a queue's keys would begin "{}", which Redis
    # hashes whole, so they would lie in several slots and no script could touch them all.
    standalone = KeySpace("zd").queue(project, "q").as_list()
    assert len({redis.crc.key_slot(key.encode()) for key in standalone}) > 1
    driver = open_test_driver(redis_cluster.url)
    assert isinstance(driver, RedisDriver)
    try:
        keys = driver._keys.queue(project, "q").as_list()
        assert len({redis.crc.key_slot(key.encode()) for key in keys}) == 1
        assert driver.create_queue(project, "q", {"k": 1}, clock.now_ms())
        now_ms = clock.now_ms()
        sid, _ = driver.create_subscription(
            project, "q", NewSubscription("http://127.0.0.1:9/h", 3600, {}, "s"), now_ms
        )
        [mid] = driver.post_messages(project, "q", [NewMessage('"x"', 60, 0)], "c", now_ms).ids
        claim = driver.create_claim(project, "q", ClaimTimes(30, 30), 5, now_ms)
        assert claim is not None and [m.id for m in claim.messages] == [mid]
        assert driver.due_push_queues(now_ms, 10) == [(project, "q")]
        [push] = driver.lease_pushes(project, "q", LeaseRequest(now_ms, 30_000, 10))
        assert (push.subscription.id, push.message.id) == (sid, mid)
        assert [q.name for q in driver.list_queues(project, None, 10, False)] == ["q"]
        # Another project's queue of the same name is another queue.
        assert driver.stats("}y", "q", now_ms).total == 0
        driver.delete_queue(project, "q")
        assert driver.get_metadata(project, "q") is None
    finally:
        close_test_driver(driver)


def test_a_queue_s_push_index_is_written_before_its_deliveries_are_read(
    redis_cluster: RedisCluster, clock: FakeClock
) -> None:
    """A post owing a push between a lease and the lease's index write: the index write must
    come first, or the post's lower entry is overwritten and its push waits until the later
    one (the index is on one node, the queue's deliveries on another)."""
    driver = open_test_driver(redis_cluster.url)
    assert isinstance(driver, RedisDriver)
    try:
        cluster = driver._client._cluster()
        index_node = cluster.get_node_from_key(driver._keys.pushes())
        queue = next(
            f"q{i}"
            for i in range(100)
            if cluster.get_node_from_key(driver._keys.queue("p", f"q{i}").deliveries).name
            != index_node.name
        )
        deliveries = driver._keys.queue("p", queue).deliveries
        owed_ms = clock.now_ms() + 5_000
        # The fault: the index's node holds every write for 0.5 s (a busy node), and the
        # post's delivery lands on the queue's node meanwhile.
        paused = redis.Redis(port=index_node.port)
        assert paused.client_pause(500, all=False)
        queue_node = redis.Redis(port=int(cluster.get_node_from_key(deliveries).port))

        def post_meanwhile() -> int:
            time.sleep(0.2)
            return int(queue_node.zadd(deliveries, {"s:m": owed_ms}))

        with ThreadPoolExecutor(1) as pool:
            posted = pool.submit(post_meanwhile)
            assert driver.lease_pushes("p", queue, LeaseRequest(clock.now_ms(), 30_000, 10)) == []
            assert posted.result() == 1
        member = queue_member("p", queue)
        assert cluster.zscore(driver._keys.pushes(), member) == owed_ms
    finally:
        close_test_driver(driver)


def test_a_node_that_never_received_the_scripts_runs_them_sent_whole(
    redis_cluster: RedisCluster, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on a primary added to scale out, which a slot moves to after the scripts were
    loaded: the node serving the queue knows no script, and loading them does not reach it."""
    driver = open_test_driver(redis_cluster.url)
    try:
        assert isinstance(driver, RedisDriver)
        driver.post_messages("p", "q", [NewMessage('"x"', 60, 0)], "c", clock.now_ms())
        for node in redis_cluster.nodes:
            redis.Redis(port=node.port).script_flush()
        cluster = driver._client._cluster()
        monkeypatch.setattr(cluster, "script_load", lambda script: hashlib.sha1(script).hexdigest())
        owner = cluster.get_node_from_key(KeySpace(cluster=True).queue("p", "q").queue)
        post_sha = driver._scripts["post"].sha
        assert redis.Redis(port=owner.port).script_exists(post_sha) == [False]  # the fault
        driver.post_messages("p", "q", [NewMessage('"y"', 60, 0)], "c", clock.now_ms())
        assert redis.Redis(port=owner.port).script_exists(post_sha) == [True]
        assert driver.stats("p", "q", clock.now_ms()).total == 2
    finally:
        close_test_driver(driver)


def migrating(source: redis.Redis, target: redis.Redis, slot: int) -> None:
    """Mark ``slot`` as moving from ``source`` to ``target`` (as ``redis-cli --cluster
    reshard`` does before it moves the keys): a key ``source`` does not hold is redirected
    (``ASK``) to ``target``."""
    source_id, target_id = (
        source.execute_command("CLUSTER MYID"),
        target.execute_command("CLUSTER MYID"),
    )
    target.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", source_id)
    source.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", target_id)


def settled(nodes: list[redis.Redis], slot: int) -> None:
    for node in nodes:
        node.execute_command("CLUSTER SETSLOT", slot, "STABLE")


@pytest.mark.parametrize("routed", [False, True], ids=["redis-py", "driver"])
def test_a_pipeline_follows_an_ask_to_a_primary_its_slot_map_does_not_list(
    redis_cluster: RedisCluster, routed: bool
) -> None:
    """A count reads a project's queues in a pipeline; one redirected (``ASK``) to a primary
    the client's slot map does not list (one added to scale the cluster out) is sent again
    on its own. redis-py's pipeline failed there with an ``AttributeError``, a post answered
    500 while ``tests/functional/test_resharding.py`` moved a slot; the driver's follows the
    redirect, as its client does."""
    driver = open_test_driver(redis_cluster.url)
    assert isinstance(driver, RedisDriver)
    cluster = driver._client._cluster()
    key = "{moving}absent"
    slot = cluster.keyslot(key)
    source = cluster.nodes_manager.slots_cache[slot][0]
    target = next(node for node in cluster.get_primaries() if node.name != source.name)
    clients = [redis.Redis(port=source.port), redis.Redis(port=target.port)]
    client = cluster if routed else redis.cluster.RedisCluster(host="127.0.0.1", port=source.port)
    try:
        migrating(clients[0], clients[1], slot)
        client.nodes_manager.nodes_cache.pop(target.name)  # as if it had just been added
        pipe = client.pipeline(transaction=False)
        pipe.exists(key)
        if not routed:
            with pytest.raises(AttributeError):
                pipe.execute()
            return
        assert pipe.execute() == [0]
        assert target.name in cluster.nodes_manager.nodes_cache, "redirected to the target"
    finally:
        settled(clients, slot)
        for node_client in clients:
            node_client.close()
        if not routed:
            client.close()
        close_test_driver(driver)


def test_a_command_whose_slot_map_names_no_node_is_sent_again_on_the_map_read_anew(
    redis_cluster: RedisCluster, clock: FakeClock
) -> None:
    """A slot map that names no node for a command's slot (redis-py's, while a slot moves)
    makes redis-py fail the command with an ``AttributeError``, twice over (routing, then
    recording the error's metric): the driver's client reads the map again and sends the
    command once more."""
    driver = open_test_driver(redis_cluster.url)
    assert isinstance(driver, RedisDriver)
    try:
        cluster, queue_key, slot = queue_slot(driver, "nowhere", clock)
        plain = redis.cluster.RedisCluster(host="127.0.0.1", port=redis_cluster.nodes[0].port)
        try:
            plain.nodes_manager.slots_cache[slot] = [None]
            with pytest.raises(AttributeError):
                plain.exists(queue_key)  # redis-py's own client, on such a map
        finally:
            plain.close()

        cluster.nodes_manager.slots_cache[slot] = [None]
        posted = driver.post_messages(
            "p", "nowhere", [NewMessage('"x"', 60, 0)], "c", clock.now_ms()
        )
        assert len(posted.ids) == 1
        assert cluster.nodes_manager.slots_cache[slot][0] is not None, "the map was read again"
        assert driver.stats("p", "nowhere", clock.now_ms()).total == 1, "the post ran once"
    finally:
        close_test_driver(driver)
