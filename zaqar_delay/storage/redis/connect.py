"""Builds a redis-py client from a storage URI."""

from __future__ import annotations

from typing import Any

import redis

from zaqar_delay.errors import StorageConfigError

REDIS_SCHEMES = ("redis", "rediss", "unix")


def redis_client(uri: str, socket_timeout: float) -> Any:
    """A client for ``redis://``, ``rediss://`` or ``unix://`` URIs, bounded by ``socket_timeout``.

    Connections are made lazily and re-made after a failure, so a store that comes back is
    used again without a restart.
    """
    try:
        return redis.Redis.from_url(
            uri,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
            health_check_interval=30,
        )
    except ValueError as exc:
        raise StorageConfigError(f"Invalid storage URI {uri!r}: {exc}") from exc
