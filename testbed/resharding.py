"""Scaling a throw-away Redis Cluster out: a primary added with no slot, and one slot moved to
it as ``redis-cli --cluster reshard`` moves slots (``CLUSTER SETSLOT ... IMPORTING`` and
``MIGRATING``, ``MIGRATE`` a few keys at a time, ``SETSLOT ... NODE`` on every node), slowed
down so that requests meet each stage of the move."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass

import redis

from testbed.processes import (
    RedisCluster,
    RedisServer,
    free_cluster_port,
    online_replicas,
    redis_cli_binary,
    wait_until,
)


@dataclass(frozen=True)
class SlotMove:
    """What happened while a slot moved."""

    slot: int
    keys_moved: int
    #: Whether ``CLUSTER SLOTS`` listed the new primary when the move began (a primary
    #: with no slot is in no reply, so a client's slot map cannot know it).
    target_listed_before: bool
    #: Keys of the slot on each side while the move was held with every key moved and the
    #: slot still migrating: requests then reach the new primary by ``ASK`` alone.
    source_keys_held: int
    target_keys_held: int
    #: ``ASK`` replies the old primary had given when the slot's new owner was set.
    source_asks: int


def add_primary(cluster: RedisCluster, replicas: int = 0) -> list[RedisServer]:
    """Start a redis-server and join it to ``cluster`` as a primary serving no slot, with
    ``replicas`` replicas of its own; the servers started, the primary first (append-only
    files on with replicas, as :class:`RedisCluster` does)."""
    entry = f"127.0.0.1:{cluster.nodes[0].port}"
    servers = [
        RedisServer(
            port=free_cluster_port(),
            aof=replicas > 0,
            extra_args=["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"],
        ).start()
        for _ in range(1 + replicas)
    ]
    primary, *replica_servers = servers
    _cluster_command("add-node", f"127.0.0.1:{primary.port}", entry)
    wait_until(lambda: _cluster_ok(primary.port), 30, "the added primary joining")
    for replica in replica_servers:
        _cluster_command(
            "add-node",
            f"127.0.0.1:{replica.port}",
            entry,
            "--cluster-slave",
            "--cluster-master-id",
            node_id(primary.port),
        )
    for replica in replica_servers:
        wait_until(lambda r=replica: _cluster_ok(r.port), 30, "the added replica joining")
    if replica_servers:
        wait_until(
            lambda: online_replicas(_node(primary.port)) >= replicas,
            30,
            "the added primary's replicas",
        )
    return servers


def node_id(port: int) -> str:
    """The cluster node id of the node on ``port``."""
    return str(_node(port).execute_command("CLUSTER", "MYID").decode())


def move_slot(
    cluster_ports: list[int],
    source: int,
    target: int,
    slot: int,
    batch: int = 2,
    pause_s: float = 0.1,
    hold_s: float = 1.0,
) -> SlotMove:
    """Move ``slot`` from the primary on port ``source`` to the one on ``target``:
    ``batch`` keys at a time, ``pause_s`` apart; then ``hold_s`` seconds with every key on
    ``target`` and the slot still migrating, before every primary in ``cluster_ports`` is told
    the slot's new owner."""
    source_node, target_node = _node(source), _node(target)
    listed = any(
        int(node[1]) == target
        for served in source_node.execute_command("CLUSTER", "SLOTS")
        for node in served[2:]
    )
    target_node.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(source))
    source_node.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(target))
    moved = 0
    while keys := source_node.execute_command("CLUSTER", "GETKEYSINSLOT", slot, batch):
        source_node.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys)
        moved += len(keys)
        time.sleep(pause_s)
    held = (
        source_node.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot),
        target_node.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot),
    )
    time.sleep(hold_s)
    asks = source_node.info("errorstats").get("errorstat_ASK", {}).get("count", 0)
    owner = node_id(target)
    for port in cluster_ports:
        node = _node(port)
        if node.info("replication")["role"] == "master":  # replicas learn it from theirs
            node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", owner)
    return SlotMove(slot, moved, listed, int(held[0]), int(held[1]), int(asks))


def _node(port: int) -> redis.Redis:
    return redis.Redis(port=port, socket_timeout=5)


def _cluster_ok(port: int) -> bool:
    return bool(_node(port).cluster("INFO")["cluster_state"] == "ok")


def _cluster_command(*args: str) -> None:
    subprocess.run(
        [redis_cli_binary(), "--cluster", *args],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
    )
