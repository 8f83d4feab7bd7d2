"""A partition with real processes: the primary and one of three Sentinels are cut off, in a
network namespace, from the two replicas, the other two Sentinels and the server
(``[storage] replica_acks = 1``), while producers and consumers work.

The two Sentinels on the server's side promote a replica; when the partition heals the old
primary comes back as a replica of the new one, dropping whatever it took that no replica
had. Every message answered 201 is delivered exactly once, none early, none lost. The data
nodes also run with Redis' ``min-replicas-to-write 1`` (``min-replicas-max-lag 2``), so a
primary cut off from every replica stops taking writes after about two seconds whoever writes.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from collections.abc import Iterator

import pytest
import redis

from testbed import netns
from testbed.processes import Placement, RedisSentinelGroup, ServiceProcess, wait_until
from tests.helpers.failover import (
    QUEUE,
    STORE_CONFIG,
    Run,
    finish_and_check,
    first_post_after,
    start_load,
    wait_for_posting,
    wake_up_listeners,
)
from zaqar_delay.conf import STORAGE_URI_ENV

pytestmark = [
    pytest.mark.functional,
    pytest.mark.faults,
    pytest.mark.skipif(not netns.available(), reason="network namespaces need root and ip"),
]

MIN_REPLICAS = ["--min-replicas-to-write", "1", "--min-replicas-max-lag", "2"]


@pytest.fixture
def link() -> Iterator[netns.Link]:
    with netns.Link() as link:
        yield link


@pytest.fixture
def group(link: netns.Link) -> Iterator[RedisSentinelGroup]:
    def place(role: str, index: int) -> Placement:
        """The primary and the first Sentinel in the namespace; the rest on this side."""
        if role == "primary" or (role == "sentinel" and index == 0):
            return link.inner, link.prefix
        return link.outer, []

    group = RedisSentinelGroup(
        replicas=2, sentinels=3, down_after_ms=1000, extra_args=MIN_REPLICAS, place=place
    ).start()
    yield group
    group.stop()


@pytest.fixture
def server(group: RedisSentinelGroup) -> Iterator[ServiceProcess]:
    config = os.path.join(tempfile.mkdtemp(prefix="zd-partition-"), "zaqar-delay.conf")
    with open(config, "w") as f:
        f.write(STORE_CONFIG)
    service = ServiceProcess(
        env={STORAGE_URI_ENV: group.url()}, args=["--config-file", config]
    ).start()
    yield service
    service.stop()


def reachable(address: tuple[str, int]) -> bool:
    try:
        socket.create_connection(address, timeout=1).close()
        return True
    except OSError:
        return False


def test_a_partitioned_primary_loses_no_acknowledged_message(
    link: netns.Link, group: RedisSentinelGroup, server: ServiceProcess
) -> None:
    run = Run()
    threads = start_load(server, run, (QUEUE,))
    try:
        time.sleep(3)
        old = group.primary_address()
        assert old[0] == link.inner, "the primary is not in the namespace"
        listening_before = wake_up_listeners(redis.Redis(*old, socket_timeout=2))
        assert listening_before > 0, "no waiting claim started a wake-up subscription"
        link.partition()
        cut_at = time.time()
        assert not reachable(old), "the partition lets packets through"
        # The Sentinels on this side (all but the first) promote a replica.
        wait_until(lambda: group.primary_address(skip=1) != old, 30, "the failover")
        new = group.primary_address(skip=1)
        wait_for_posting(run, cut_at)
        time.sleep(2)
        # Each worker's wake-up subscription moved to the new primary, before the old one
        # could tell it anything. A worker moves it once one of its own connections has
        # seen the new primary, which on a loaded machine took over 15 s once.
        promoted = redis.Redis(*new, socket_timeout=2)
        wait_until(
            lambda: wake_up_listeners(promoted) >= listening_before, 45, "the wake-up listeners"
        )
        link.heal()
        # The first connection may still wait on the neighbour table, which the partition
        # left marked as failed: a few seconds, not one attempt.
        wait_until(lambda: reachable(old), 10, "the healed link")
        # The old primary rejoins as a replica of the new one, dropping what it alone had.
        old_node = redis.Redis(*old, socket_timeout=2)
        wait_until(lambda: old_node.role()[0] == b"slave", 60, "the old primary's demotion")
        time.sleep(1)
    finally:
        run.producing.clear()
    finish_and_check(run, threads, producers=1)

    resumed_s = first_post_after(cut_at, run)
    print(
        f"partition: {len(run.acknowledged)} messages acknowledged, none lost; refused and "
        f"retried: {run.refused}; posting resumed {resumed_s:.2f} s after the cut; new "
        f"primary {new[0]}:{new[1]}"
    )
