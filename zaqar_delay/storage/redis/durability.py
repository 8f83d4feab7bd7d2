"""What a Redis store promises an acknowledged message, read from the store when the server
starts.

- A store that evicts any key under memory pressure (``maxmemory-policy`` ``allkeys-*``, with a
  ``maxmemory`` set) drops messages silently: the server refuses it. (``volatile-*`` policies
  evict only keys with an expiry; messages have none.)
- A store with neither an append-only file nor a connected replica loses, when it dies, what
  it acknowledged since its last snapshot: the server says so.

On Redis Cluster every primary is read. A store that does not answer ``CONFIG GET`` (a managed
Redis may forbid it) or ``INFO`` (an ACL user without ``@dangerous`` may run neither) cannot be
checked; the server says that too, and the durability report claims nothing it could not read.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import redis

from zaqar_delay.errors import StorageConfigError
from zaqar_delay.storage.redis.sentinel import primary_view
from zaqar_delay.storage.traits import Durability

EVICTING_PREFIX = "allkeys-"


@dataclasses.dataclass(frozen=True, slots=True)
class NodeDurability:
    """One Redis node as the check read it."""

    name: str
    policy: str | None  # maxmemory-policy; None: the node would not say
    maxmemory: int | None
    aof: bool | None  # None: the node would not say (INFO refused)
    replicas: int | None  # connected replicas; None: the node would not say
    appendfsync: str | None = None  # None: the node would not say

    @property
    def evicts(self) -> bool:
        """Whether the node may drop any key, a message's among them."""
        return bool(self.maxmemory) and (self.policy or "").startswith(EVICTING_PREFIX)


def nodes_of(client: Any) -> list[tuple[str, redis.Redis]]:
    """The nodes that hold data: the client itself, or each primary of a cluster."""
    if isinstance(client, redis.Redis):
        return [("store", client)]
    return [
        (f"primary {node.host}:{node.port}", client.get_redis_connection(node))
        for node in client.get_primaries()
    ]


def read(name: str, node: redis.Redis) -> NodeDurability:
    persistence: dict[str, Any] | None
    replication: dict[str, Any] | None
    try:
        persistence = node.info("persistence")
        replication = node.info("replication")
    except redis.ResponseError:  # INFO forbidden (an ACL without @dangerous)
        persistence = replication = None
    try:
        config = node.config_get("maxmemory*")
        config.update(node.config_get("appendfsync"))
    except redis.ResponseError:  # CONFIG renamed or forbidden
        config = {}
    maxmemory = config.get("maxmemory")
    return NodeDurability(
        name=name,
        policy=config.get("maxmemory-policy"),
        maxmemory=None if maxmemory is None else int(maxmemory),
        aof=None if persistence is None else bool(int(persistence.get("aof_enabled", 0))),
        replicas=None if replication is None else int(replication.get("connected_slaves", 0)),
        appendfsync=config.get("appendfsync"),
    )


def check(client: Any, replicas_required: int = 0) -> list[str]:
    """Warnings about what the store does not promise (a planned Sentinel failover with
    fewer replica acks than replicas among them), and about fewer connected replicas than
    ``[storage] replica_acks`` requires (writes answer 503 until they connect);
    ``StorageConfigError`` for a store that would drop messages, or that refuses the WAIT
    the replica acks need."""
    data_nodes = nodes_of(client)
    _refuse_without_wait(data_nodes, replicas_required)
    nodes = [read(name, node) for name, node in data_nodes]
    evicting = [n for n in nodes if n.evicts]
    if evicting:
        node = evicting[0]
        raise StorageConfigError(
            f"the Redis {node.name} evicts keys under memory pressure (maxmemory-policy "
            f"{node.policy}): messages would be dropped silently; set it to noeviction"
        )
    warnings = []
    unchecked = [n.name for n in nodes if n.policy is None]
    if unchecked:
        nodes_named, its, _ = _named(unchecked)
        warnings.append(
            f"{nodes_named} would not show {its} maxmemory-policy: make sure it is "
            "noeviction, or messages may be dropped under memory pressure"
        )
    unread = [n.name for n in nodes if n.aof is None]
    if unread:
        nodes_named, its, _ = _named(unread)
        each = "it" if len(unread) == 1 else "each"
        warnings.append(
            f"{nodes_named} would not show {its} persistence and replicas (INFO refused): make "
            f"sure {each} keeps an append-only file or a replica, or messages acknowledged "
            "since its last snapshot are lost if it dies"
        )
    exposed = [n.name for n in nodes if n.aof is False and not n.replicas]
    if exposed:
        nodes_named, its, has = _named(exposed)
        warnings.append(
            f"{nodes_named} {has} neither an append-only file nor a replica: messages "
            f"acknowledged since {its} last snapshot are lost if it dies"
        )
    most = max((n.replicas or 0 for n in nodes), default=0)
    if store_kind(client) == "redis-sentinel" and 1 <= replicas_required < most:
        warnings.append(
            f"[storage] replica_acks = {replicas_required} with {most} replicas behind "
            "Sentinel: a planned failover (SENTINEL FAILOVER) may lose writes acknowledged "
            "while it runs, since the former primary takes writes its other replicas confirm "
            f"until Sentinel demotes it; replica_acks = {most} closes this"
        )
    short = [n for n in nodes if n.replicas is not None and n.replicas < replicas_required]
    if short:
        warnings.append(
            f"the Redis {', '.join(n.name for n in short)} has {short[0].replicas} connected "
            f"replica(s) and [storage] replica_acks = {replicas_required}: writes answer 503 "
            "until enough replicas connect"
        )
    return warnings


def _refuse_without_wait(data_nodes: list[tuple[str, redis.Redis]], replicas_required: int) -> None:
    """StorageConfigError when ``[storage] replica_acks`` is set and a data node refuses WAIT
    (a user whose ACL leaves it out, or the command renamed away): the store would keep every
    write and each would answer 503, "may still have happened"."""
    if not replicas_required:
        return
    for name, node in data_nodes:
        try:
            node.wait(0, 1)  # no replica to wait for: answers at once
        except redis.ResponseError as exc:
            raise StorageConfigError(
                f"[storage] replica_acks = {replicas_required} needs WAIT, which the Redis "
                f"{name} refuses ({exc}): grant it (ACL SETUSER <user> +wait) or set "
                "replica_acks = 0"
            ) from exc


def _named(names: list[str]) -> tuple[str, str, str]:
    """How a warning names nodes of ``nodes_of``: "the Redis store" or "the Redis primaries
    A, B and C", with the possessive and the "has" that go with it."""
    if len(names) == 1:
        return f"the Redis {names[0]}", "its", "has"
    addresses = [name.removeprefix("primary ") for name in names]
    listed = f"{', '.join(addresses[:-1])} and {addresses[-1]}"
    return f"the Redis primaries {listed}", "their", "have"


def describe(client: Any, replica_acks: int) -> Durability | None:
    """What an acknowledged write survives on the store ``client`` reaches, read from it;
    None when a node would not show its persistence (``INFO`` refused).

    - process crash and power loss: every primary fsyncs its append-only file before it
      answers (``appendfsync always``). A primary with ``everysec`` may lose about its last
      second, one without an append-only file everything since its last snapshot.
    - machine loss: ``replica_acks`` >= 1, so another machine holds every acknowledged write.
    - process crash too, and failover: ``replica_acks`` >= 1 behind Redis Sentinel or in a
      Redis Cluster, which promote the replica holding the most (so every acknowledged
      write; a planned Sentinel failover only with as many replica acks as replicas, which
      :func:`check` warns of). Without replica acks a failover promotes a replica that may
      lack the writes of the primary's last moments; without a failover, a primary with no
      append-only file that restarts empty empties its replicas as well.
    """
    nodes = [read(name, node) for name, node in nodes_of(client)]
    if any(n.aof is None for n in nodes):
        return None
    kind = store_kind(client)
    fsynced = all(n.aof and n.appendfsync == "always" for n in nodes)
    replicated = replica_acks >= 1
    followed = replicated and kind in ("redis-sentinel", "redis-cluster")
    survives = []
    if fsynced or followed:
        survives.append("process crash")
    if fsynced:
        survives.append("power loss")
    if replicated:
        survives.append("machine loss")
    if followed:
        survives.append("failover")
    return Durability(
        store=kind,
        replica_acks=replica_acks,
        survives=tuple(survives),
        facts={
            n.name: {
                "appendonly": n.aof,
                "appendfsync": n.appendfsync,
                "connected_replicas": n.replicas,
                "maxmemory_policy": n.policy,
            }
            for n in nodes
        },
    )


def store_kind(client: Any) -> str:
    """redis, redis-sentinel or redis-cluster."""
    if not isinstance(client, redis.Redis):
        return "redis-cluster"
    if primary_view(client.connection_pool) is not None:
        return "redis-sentinel"
    return "redis"
