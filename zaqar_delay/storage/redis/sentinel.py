"""A Redis client that follows the primary Redis Sentinel names, from Zaqar's Sentinel URI.

``redis://[[user]:password@]s1[:26379],s2[:26379],...?master=NAME`` lists Sentinels, not data
nodes (``rediss://`` for TLS to the data nodes). Query options, as Zaqar reads them:

- ``master``: the name the Sentinels monitor (its presence is what makes the URI a Sentinel one);
- ``socket_timeout`` (seconds) for the data nodes and the Sentinels, instead of
  ``[storage] socket_timeout``;
- ``dbid``: the database number;
- ``sentinel_username`` and ``sentinel_password``: credentials of the Sentinels themselves
  (the userinfo part is the data nodes');
- with ``rediss://``, the TLS options of ``uri_options`` for the data nodes, and
  ``sentinel_tls=true`` to reach the Sentinels over TLS too, with the same options (Sentinels
  that serve TLS only, ``port 0`` and a ``tls-port``).

Every new connection asks the Sentinels for the primary, so after a failover the next request
reaches the new one. Until a Sentinel names a primary that answers, requests fail with
``MasterNotFoundError`` or a connection error: the driver answers 503.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from typing import Any

import redis
from redis.sentinel import Sentinel, SentinelConnectionPool

from zaqar_delay.errors import StorageConfigError
from zaqar_delay.storage.redis import uri_options
from zaqar_delay.storage.redis.connect import connection_retry, pool_options

SENTINEL_DEFAULT_PORT = 26379
SCHEMES = ("redis", "rediss")


@dataclasses.dataclass(frozen=True, slots=True)
class SentinelTarget:
    """What a Sentinel URI names."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    tls: bool = False
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None
    db: int = 0
    socket_timeout: float | None = None
    tls_arguments: dict[str, Any] = dataclasses.field(default_factory=dict)
    sentinel_tls: bool = False


def is_sentinel_uri(uri: str) -> bool:
    """Whether ``uri`` is a ``redis://`` or ``rediss://`` URI naming a Sentinel ``master``."""
    parsed = urllib.parse.urlsplit(uri)
    return parsed.scheme in SCHEMES and "master" in urllib.parse.parse_qs(parsed.query)


def parse_sentinel_uri(uri: str) -> SentinelTarget:
    """The Sentinels, primary name and options of ``uri``; StorageConfigError when malformed."""
    parsed = urllib.parse.urlsplit(uri)
    query = uri_options.query_of(uri)
    tls_arguments = uri_options.check_uri(uri)
    userinfo, _, hosts = parsed.netloc.rpartition("@")
    sentinels = tuple(_host_port(uri, entry) for entry in hosts.split(",") if entry)
    if not sentinels:
        raise StorageConfigError(f"Invalid storage URI {uri!r}: no Sentinel host given")
    master = query.get("master", "")
    if not master:
        raise StorageConfigError(f"Invalid storage URI {uri!r}: master= names no primary")
    username = password = None
    if userinfo:
        user, has_password, secret = userinfo.partition(":")
        username = urllib.parse.unquote(user) or None
        password = urllib.parse.unquote(secret) if has_password else None
    return SentinelTarget(
        sentinels=sentinels,
        master=master,
        tls=parsed.scheme == "rediss",
        username=username,
        password=password,
        sentinel_username=query.get("sentinel_username") or None,
        sentinel_password=query.get("sentinel_password") or None,
        db=uri_options.number(uri, query, "dbid", int, 0),
        socket_timeout=uri_options.number(uri, query, "socket_timeout", float, None),
        tls_arguments=tls_arguments,
        sentinel_tls=_sentinel_tls(uri, query, parsed.scheme == "rediss"),
    )


def _sentinel_tls(uri: str, query: dict[str, str], tls: bool) -> bool:
    value = query.get("sentinel_tls", "false").lower()
    if value not in uri_options.BOOLEANS:
        raise StorageConfigError(f"Invalid storage URI {uri!r}: sentinel_tls: use true or false")
    if uri_options.BOOLEANS[value] and not tls:
        raise StorageConfigError(
            f"Invalid storage URI {uri!r}: sentinel_tls=true needs rediss:// (TLS to the data "
            "nodes too)"
        )
    return uri_options.BOOLEANS[value]


def _host_port(uri: str, entry: str) -> tuple[str, int]:
    host, port = entry, str(SENTINEL_DEFAULT_PORT)
    if entry.startswith("["):  # [IPv6] or [IPv6]:port
        host, _, rest = entry[1:].partition("]")
        if rest:
            port = rest.removeprefix(":")
    elif ":" in entry:
        host, _, port = entry.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise StorageConfigError(f"Invalid storage URI {uri!r}: {entry!r} is not host[:port]")
    return host, int(port)


def primary_view(pool: Any) -> Any | None:
    """A Sentinel pool's view of the primary, None for any other pool: redis-py's proxy, whose
    ``master_address`` is what the pool's latest new connection was told and whose
    ``get_master_address()`` asks the Sentinels again (dropping the pool's idle connections
    when the answer changed)."""
    return pool.proxy if isinstance(pool, SentinelConnectionPool) else None


def on_former_primary(view: Any | None, connection: Any) -> bool:
    """Whether ``connection`` reaches another primary than the one Sentinel last named
    (``view`` from :func:`primary_view`; never for a client without Sentinel)."""
    primary = None if view is None else view.master_address
    return primary is not None and (connection.host, connection.port) != primary


class _BlockingSentinelPool(SentinelConnectionPool, redis.BlockingConnectionPool):
    """Sentinel's pool (a new connection goes to the primary Sentinel names now) with the
    blocking pool's limit: past ``max_connections`` a request waits for a free connection
    instead of failing, as on a standalone store."""


def sentinel_client(uri: str, socket_timeout: float, max_connections: int = 64) -> redis.Redis:
    """A client of the primary the Sentinels of ``uri`` name, bounded like ``redis_client``.

    A Sentinel that does not answer costs one ``socket_timeout`` before the next is asked:
    its client retries as the data nodes' do (once, at once, on a connection error; never a
    timeout) instead of redis-py's default of ten retries with backoff, which made a Sentinel
    cut off by a partition hold every new connection for about half a minute (the next
    Sentinel in the list is the retry)."""
    target = parse_sentinel_uri(uri)
    timeout = target.socket_timeout or socket_timeout
    sentinels = Sentinel(  # type: ignore[no-untyped-call,unused-ignore]  # typed from redis 8.2
        list(target.sentinels),
        sentinel_kwargs={
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "retry": connection_retry(),
            "username": target.sentinel_username,
            "password": target.sentinel_password,
            **({"ssl": True, **target.tls_arguments} if target.sentinel_tls else {}),
        },
    )
    pool = _BlockingSentinelPool(  # type: ignore[no-untyped-call]
        target.master,
        sentinels,
        ssl=target.tls,
        db=target.db,
        username=target.username,
        password=target.password,
        **target.tls_arguments,
        **pool_options(timeout, max_connections),
    )
    return redis.Redis(connection_pool=pool)
