"""Builds a redis-py client from a storage URI."""

from __future__ import annotations

import urllib.parse
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from zaqar_delay.errors import StorageConfigError
from zaqar_delay.storage.redis import uri_options

#: How many times a command that failed with a connection error is sent again, at once, on a
#: fresh connection (see :func:`connection_retry`; the scripts' own path in ``scripts.py`` too).
RETRIES_ON_CONNECTION_ERROR = 1


def connection_retry() -> Retry:
    """Retry once, at once, on a connection error only.

    A pooled connection that went stale while the store restarted fails when the command is
    sent, so one immediate retry on a fresh connection hides the restart. Timeouts are never
    retried: a script that timed out may have run, and running a post or a claim twice would
    duplicate or strand messages; the request answers 503 instead, within socket_timeout.
    """
    return Retry(
        NoBackoff(), RETRIES_ON_CONNECTION_ERROR, supported_errors=(redis.ConnectionError,)
    )


def pool_options(socket_timeout: float, max_connections: int) -> dict[str, Any]:
    """The options every pool of the driver is built with (standalone and Sentinel)."""
    return {
        "max_connections": max_connections,
        "timeout": socket_timeout,
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_timeout,
        "health_check_interval": 30,
        "retry": connection_retry(),
    }


def redis_client(uri: str, socket_timeout: float, max_connections: int = 64) -> Any:
    """A client for ``redis://``, ``rediss://`` or ``unix://`` URIs, bounded by ``socket_timeout``.

    At most ``max_connections`` connections per process: past that, a request waits (up to
    ``socket_timeout``) for one to come free instead of failing, so a burst of a thousand
    concurrent requests in one gevent worker shares a few dozen connections. Connections are
    made lazily and re-made after a failure, so a store that comes back is used again without
    a restart. The URI's query options are checked first (``uri_options``); redis-py reads
    the ones it takes itself.
    """
    uri_options.check_uri(uri)
    try:
        pool = redis.BlockingConnectionPool.from_url(
            with_zaqar_options(uri), **pool_options(socket_timeout, max_connections)
        )
        return redis.Redis(connection_pool=pool)
    except ValueError as exc:
        raise StorageConfigError(f"Invalid storage URI {uri!r}: {exc}") from exc


def with_zaqar_options(uri: str) -> str:
    """``uri`` with Zaqar's ``dbid`` query option spelled as redis-py's ``db``.

    (Zaqar's ``socket_timeout``, in seconds, is redis-py's own and overrides
    ``[storage] socket_timeout``.)
    """
    parsed = urllib.parse.urlsplit(uri)
    query = urllib.parse.parse_qsl(parsed.query, keep_blank_values=True)
    if not any(name == "dbid" for name, _ in query):
        return uri
    renamed = [("db" if name == "dbid" else name, value) for name, value in query]
    return urllib.parse.urlunsplit(parsed._replace(query=urllib.parse.urlencode(renamed)))
