"""Turns Redis client failures into the service's storage errors."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import redis
from redis.sentinel import MasterNotFoundError

from zaqar_delay.errors import StorageUnavailable, StoreFull
from zaqar_delay.storage.translating import on_public_methods

P = ParamSpec("P")
R = TypeVar("R")

# Server replies that mean "not now" rather than "wrong": the request may succeed on retry.
# MISCONF: the store cannot write its append-only file or snapshot (a full disk) and refuses
# writes until it can. NOREPLICAS: a primary with min-replicas-to-write has too few replicas
# connected (cut off from them, or just promoted and still being joined).
_TRANSIENT_REPLIES = frozenset(
    {
        "LOADING",
        "READONLY",
        "MASTERDOWN",
        "CLUSTERDOWN",
        "TRYAGAIN",
        "OOM",
        "BUSY",
        "MISCONF",
        "NOREPLICAS",
    }
)
# A command refused inside a script comes back wrapped:
# "Error running script (call to f_...): @user_script:1: @user_script: 1: -MISCONF Errors ..."
_SCRIPT_REPLY = re.compile(r"@user_script: ?\d+: -([A-Z]+)")


# Cluster failures that mean a node or slot is unreachable for now (not a bug). A redirect
# that reaches the driver (MOVED, and ASK: MovedError is an AskError) was not followed this
# time, a slot moving again mid-call: the script did not run, and a retry finds the slot.
_CLUSTER_OUTAGES = (
    redis.exceptions.ClusterError,
    redis.exceptions.SlotNotCoveredError,
    redis.exceptions.AskError,
)
# Replies redis-py's parser turns into classes of their own, their code cut from the message.
_PARSED_REPLIES = (
    (redis.exceptions.TryAgainError, "TRYAGAIN"),
    (redis.exceptions.ReadOnlyError, "READONLY"),
    (redis.exceptions.OutOfMemoryError, "OOM"),
)


def is_transient(exc: Exception) -> bool:
    """True for outages (connection, timeout, failover, memory) as opposed to bugs."""
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, *_CLUSTER_OUTAGES)):
        return True
    return _reply_code(exc) in _TRANSIENT_REPLIES


def _reply_code(exc: Exception) -> str | None:
    """The code of the error reply ``exc`` stands for (``OOM``, ``READONLY``, ...), also one
    refused inside a script or parsed into a class of its own; None when it is no reply."""
    for parsed, code in _PARSED_REPLIES:
        if isinstance(exc, parsed):
            return code
    if not isinstance(exc, redis.ResponseError):
        return None
    message = str(exc)
    wrapped = _SCRIPT_REPLY.search(message)
    return wrapped.group(1) if wrapped else message.split(" ", 1)[0]


def why_unreachable(ping: Callable[[], object]) -> str | None:
    """None when ``ping()`` is answered; else why not, in one line (redis-py's message, with
    what to do about a certificate no CA the server trusts signed). Never raises."""
    try:
        ping()
    except (redis.RedisError, *_CLUSTER_OUTAGES) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        if "CERTIFICATE_VERIFY_FAILED" in reason:
            reason += (
                " (name the CA that signed the store's certificate in the URI: "
                "ssl_ca_certs=/path/to/ca.pem)"
            )
        return reason
    return None


def translate_errors(method: Callable[P, R]) -> Callable[P, R]:
    """Re-raise transient Redis failures as StorageUnavailable (503); others propagate."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except (redis.RedisError, *_CLUSTER_OUTAGES) as exc:
            if isinstance(exc, MasterNotFoundError):
                raise StorageUnavailable(
                    "The message store has no primary right now: its Redis Sentinels name "
                    "none that answers (a failover is under way); retry shortly"
                ) from exc
            if _reply_code(exc) == "OOM":
                raise StoreFull() from exc
            if is_transient(exc):
                raise StorageUnavailable(f"The message store is unavailable: {exc}") from exc
            raise

    return wrapper


#: The class decorator: :func:`translate_errors` on every public method the class defines.
translate_class_errors = on_public_methods(translate_errors)
