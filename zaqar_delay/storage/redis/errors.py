"""Turns Redis client failures into the service's storage errors."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import redis

from zaqar_delay.errors import StorageUnavailable

P = ParamSpec("P")
R = TypeVar("R")

# Server replies that mean "not now" rather than "wrong": the request may succeed on retry.
_TRANSIENT_REPLIES = ("LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "OOM", "BUSY")


# Cluster failures that mean a node or slot is unreachable for now (not a bug).
_CLUSTER_OUTAGES = (redis.exceptions.ClusterError, redis.exceptions.SlotNotCoveredError)


def is_transient(exc: Exception) -> bool:
    """True for outages (connection, timeout, failover, memory) as opposed to bugs."""
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, *_CLUSTER_OUTAGES)):
        return True
    return isinstance(exc, redis.ResponseError) and str(exc).startswith(_TRANSIENT_REPLIES)


def translate_errors(method: Callable[P, R]) -> Callable[P, R]:
    """Re-raise transient Redis failures as StorageUnavailable (503); others propagate."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except (redis.RedisError, *_CLUSTER_OUTAGES) as exc:
            if is_transient(exc):
                raise StorageUnavailable(f"The message store is unavailable: {exc}") from exc
            raise

    return wrapper
