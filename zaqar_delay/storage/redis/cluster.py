"""A Redis Cluster client built from a ``redis+cluster://`` URI.

The driver needs nothing cluster-specific: every script touches the keys of one queue, which
share one hash tag and so one slot, and the only other key (a project's queue index) is written
by plain single-key commands. This module only parses the URI and sets the client up so that a
timed-out script is never sent twice and a cluster that is down when a worker starts does not
stop the worker from starting.
"""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import Any

import redis
from redis.cluster import PRIMARY, ClusterNode, ClusterPipeline, RedisCluster, get_node_name
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from zaqar_delay.errors import StorageConfigError
from zaqar_delay.storage.redis import uri_options
from zaqar_delay.storage.redis.readiness import check_readiness_without_the_hub


class _Routing(RedisCluster):
    """How the driver's cluster client and the pipelines it makes route through a slot that
    is moving to a new primary: without failing on the node redis-py does not know yet."""

    def get_node(
        self, host: str | None = None, port: int | None = None, node_name: str | None = None
    ) -> ClusterNode | None:
        """The cached node of that address or name; for an address the cache lacks, a new
        primary node, added to the cache.

        An ``ASK`` redirect is followed through this lookup, and it may name a primary no
        ``CLUSTER SLOTS`` reply has listed yet: one added to scale the cluster out serves no
        slot until its first slot has moved. redis-py's own lookup then answers None and the
        command fails with an ``AttributeError`` (redis-py issue 4015), a 500 for every request
        on a slot moving to the new primary. ``MOVED`` redirects already add such a node
        (``NodesManager.move_slot``); the next read of the slot map keeps it, or releases its
        connections if it is not in the map.
        """
        node: ClusterNode | None = super().get_node(host, port, node_name)  # type: ignore[no-untyped-call]
        if node is None and host and port:
            # dict.setdefault is atomic: two redirects at once share one node and its pool.
            node = self.nodes_manager.nodes_cache.setdefault(
                get_node_name(host, port),
                ClusterNode(host, port, PRIMARY),  # type: ignore[no-untyped-call]
            )
        return node

    def get_redis_connection(self, node: ClusterNode | None) -> redis.Redis:
        """The client of ``node``. While a slot moves to a new primary, redis-py's slot map
        may hand its command no node at all; redis-py then fails with an ``AttributeError``
        (a 500). It is refused as a slot not covered instead, which redis-py answers by
        reading the slot map again and sending the command once more."""
        if node is None:
            raise redis.exceptions.SlotNotCoveredError(
                "The client's slot map names no node for this command's slot (a slot is moving)"
            )
        client: redis.Redis = super().get_redis_connection(node)
        return client

    def _record_error_metric(
        self,
        error: Exception,
        connection: Any,
        is_internal: bool = True,
        retry_attempts: int | None = None,
    ) -> None:
        """redis-py's error metric, which reads the address of the connection or node the
        error met: for an error met before any node was chosen there is none, and redis-py
        would fail on it with an ``AttributeError`` in place of the error itself."""
        if connection is not None:
            super()._record_error_metric(error, connection, is_internal, retry_attempts)


class _RoutingPipeline(_Routing, ClusterPipeline):
    """A pipeline of the driver's cluster client, routed as the client routes (``_Routing``):
    a count's pipeline meets moving slots as a post does."""


class _NoTimeoutRetryCluster(_Routing):
    """The driver's cluster client: it retries a command after a connection error or a
    topology change, but never after a timeout (a script that timed out may have run, and
    running a post or a claim twice would duplicate or strand messages)."""

    ERRORS_ALLOW_RETRY = (  # type: ignore[assignment]  # narrower on purpose
        redis.ConnectionError,
        redis.exceptions.ClusterDownError,
        redis.exceptions.SlotNotCoveredError,
    )

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterPipeline:
        """redis-py's pipeline, routed as this client is: redis-py builds it (its arguments
        change between releases), and it takes the class that adds the routing."""
        pipe: ClusterPipeline = super().pipeline(transaction, shard_hint)  # type: ignore[no-untyped-call]
        pipe.__class__ = _RoutingPipeline
        return pipe


class ClusterScript(Script):
    """redis-py's ``Script`` on a cluster client, with EVAL as its last resort.

    ``Script`` answers an unknown script (``NoScriptError``) by loading it (``SCRIPT LOAD``, to
    the nodes the client knows) and sending EVALSHA again. While a slot moves to a primary added
    to scale the cluster out, the second call may be redirected to that primary, which no load
    reached: it fails too, a 500 for a request on that slot. ``NoScriptError`` means the script
    did not run, so it is then sent whole (EVAL): it runs where its keys are, and that node
    keeps it for the next EVALSHA.
    """

    def __call__(
        self,
        keys: Sequence[Any] | None = None,
        args: Iterable[Any] | None = None,
        client: Any = None,
    ) -> Any:
        try:
            return super().__call__(keys=keys, args=args, client=client)
        except NoScriptError:
            keys, args = list(keys or ()), list(args or ())
            source = self.script if isinstance(self.script, str) else bytes(self.script).decode()
            return (client or self.registered_client).eval(source, len(keys), *keys, *args)


def parse_cluster_uri(uri: str) -> tuple[list[ClusterNode], dict[str, Any]]:
    """Startup nodes and connection options of ``redis+cluster://[user:pass@]h:p[,h:p...]``.

    ``rediss+cluster://`` turns TLS on, with the TLS options of ``uri_options``; the only
    other query option is Zaqar's ``socket_timeout`` (seconds, instead of ``[storage]
    socket_timeout``). Any node of the cluster is enough to find the others; listing several
    lets the client start while one of them is down.
    """
    parsed = urllib.parse.urlsplit(uri)
    tls_arguments = uri_options.check_uri(uri)
    userinfo, _, hosts = parsed.netloc.rpartition("@")
    nodes = []
    for entry in filter(None, hosts.split(",")):
        host, _, port = entry.rpartition(":")
        if not host or not port.isdigit():
            raise StorageConfigError(f"Invalid storage URI {uri!r}: {entry!r} is not host:port")
        nodes.append(ClusterNode(host.strip("[]"), int(port)))  # type: ignore[no-untyped-call]
    if not nodes:
        raise StorageConfigError(f"Invalid storage URI {uri!r}: no cluster node given")
    options: dict[str, Any] = {"ssl": parsed.scheme == "rediss+cluster", **tls_arguments}
    query = uri_options.query_of(uri)
    if "socket_timeout" in query:
        options["socket_timeout"] = uri_options.number(uri, query, "socket_timeout", float, None)
    if userinfo:
        user, has_password, password = userinfo.partition(":")
        options["username"] = urllib.parse.unquote(user) or None
        options["password"] = urllib.parse.unquote(password) if has_password else None
    return nodes, options


def primary_client_for(cluster_client: Any, key: str | bytes) -> redis.Redis:
    """The client of the primary serving ``key``'s slot, as the cluster client's cached slot
    map says (no round trip): where a write to ``key`` goes, and so where WAIT must follow."""
    client: redis.Redis = cluster_client.get_redis_connection(cluster_client.get_node_from_key(key))
    return client


class LazyClusterClient:
    """Stands in for a RedisCluster until the first command, then forwards to it.

    RedisCluster asks the cluster for its topology when it is built; building it on first use
    lets a server worker start while the cluster is down (requests get 503 until it is back).
    """

    def __init__(self, uri: str, socket_timeout: float, max_connections: int) -> None:
        self._nodes, options = parse_cluster_uri(uri)
        timeout = options.pop("socket_timeout", socket_timeout)
        self._options = dict(
            options,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            max_connections=max_connections,
            health_check_interval=30,
        )
        self._client: RedisCluster | None = None
        self._lock = threading.Lock()
        check_readiness_without_the_hub()

    def _cluster(self) -> RedisCluster:
        with self._lock:
            if self._client is None:
                try:
                    self._client = _NoTimeoutRetryCluster(
                        startup_nodes=self._nodes, **self._options
                    )
                except redis.exceptions.RedisClusterException as exc:
                    raise redis.ConnectionError(f"Redis Cluster unreachable: {exc}") from exc
            return self._client

    def register_script(self, source: str) -> Script:
        # Bytes, so that Script hashes them without asking the (unbuilt) client for an encoder.
        return ClusterScript(self, source.encode())  # type: ignore[arg-type]  # forwards to a cluster

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster(), name)
