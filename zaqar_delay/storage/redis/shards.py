"""Replica acknowledgements on Redis Cluster: a write runs on the connection of the shard that
holds its key's slot, followed there by WAIT (``acks.py``).

redis-py's cluster client routes a script by its keys but gives no hold of the connection it
used, and WAIT, which has no key, would go to a random node. So with ``replica_acks`` the
driver routes itself: it asks the cluster client which primary serves the slot (its cached
slot map, no round trip) and runs the script as on a standalone store (``scripts.PooledScript``)
on that primary's connections.

After a failover or a resharding the cached map is stale. A ``MOVED`` reply means the script
did not run: the map is read again and the call sent once more. An ``ASK`` reply (the slot is
moving, and none of the script's keys are left here) answers 503 at once: the map has not
changed, and the primary the slot is moving to would answer ``TRYAGAIN``, as it does for any
call whose keys it does not all hold yet (a queue's scripts name keys that may not exist).
A connection error also has the map read again, so the next request reaches the new primary,
but answers 503: the script may have run.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from typing import Any

import redis

from zaqar_delay.storage.redis.acks import ReplicaAcks
from zaqar_delay.storage.redis.cluster import primary_client_for
from zaqar_delay.storage.redis.script_calls import PooledScript, ScriptConnections


class ShardRouter:
    """The primaries of a cluster client (a ``RedisCluster`` or ``cluster.LazyClusterClient``)
    by slot, with script connections of their own per primary."""

    def __init__(self, cluster_client: Any) -> None:
        self._client = cluster_client
        self._lock = threading.Lock()
        self._connections: dict[int, tuple[redis.ConnectionPool, ScriptConnections]] = {}

    def connections_for(self, key: str | bytes) -> ScriptConnections:
        """The script connections of the primary serving ``key``'s slot."""
        pool = primary_client_for(self._client, key).connection_pool
        with self._lock:
            known = self._connections.get(id(pool))
            if known is None or known[0] is not pool:
                known = (pool, ScriptConnections(pool))
                self._connections[id(pool)] = known
            return known[1]

    def refresh(self) -> None:
        """Read the slot map again (after a redirect or a lost primary)."""
        # A cluster that is down now: the next call fails, and reads the map again.
        with contextlib.suppress(redis.RedisError, redis.exceptions.RedisClusterException):
            self._client.nodes_manager.initialize()

    def close(self) -> None:
        with self._lock:
            known, self._connections = self._connections, {}
        for _, connections in known.values():
            connections.close()


class RoutedScript:
    """One script run on the primary of its first key's slot, followed by WAIT there."""

    def __init__(self, router: ShardRouter, source: str, acks: ReplicaAcks | None) -> None:
        self._router = router
        self._source = source
        self._acks = acks
        self._by_pool: dict[int, PooledScript] = {}

    def __call__(self, keys: Sequence[str | bytes], args: Sequence[Any]) -> Any:
        for attempt in (1, 2):
            connections = self._router.connections_for(keys[0])
            script = self._by_pool.get(id(connections))
            if script is None or script.connections is not connections:
                script = PooledScript(connections, self._source, self._acks)
                self._by_pool[id(connections)] = script
            try:
                return script(keys=keys, args=args)
            except redis.exceptions.MovedError:
                if attempt == 2:
                    raise
                self._router.refresh()  # the script did not run: send it where it belongs
            except redis.ConnectionError:
                self._router.refresh()
                raise
        raise AssertionError("unreachable: the second attempt returns or raises")
