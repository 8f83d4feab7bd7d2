"""Loads the Lua scripts of the driver, each prefixed with the shared ``lib.lua``, and runs them.

On a standalone client (embedded, ``redis://``, ``rediss://``, ``unix://``) a script call goes
straight to a pooled connection: pack, send, read, one round trip. redis-py's general command
path around that (``Script``, the ``evalsha`` wrapper, the retry closure, its observability
hooks, and a Python pass over every argument before packing) cost about as much CPU as the
rest of a request's storage work together, and a queue operation passes its 21 keys each
time. On a cluster client, redis-py's ``Script`` still runs them: it routes by key slot.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

import hiredis
import redis
from redis.exceptions import NoScriptError

from zaqar_delay.storage.redis.connect import RETRIES_ON_CONNECTION_ERROR

SCRIPT_NAMES = (
    "post",
    "list",
    "list_due",
    "get",
    "claim",
    "get_claim",
    "renew_claim",
    "release_claim",
    "delete",
    "reschedule",
    "delete_many",
    "pop",
    "stats",
    "queue",
    "next_claimable",
    "subscription",
    "push",
    "upgrade",
)

#: Runs one script: ``(keys=..., args=...)`` -> the script's reply.
ScriptCall = Callable[..., Any]


def script_source(name: str) -> str:
    """The full text sent to Redis for script ``name``: lib.lua, then the script."""
    lua = resources.files(__package__).joinpath("lua")
    return lua.joinpath("lib.lua").read_text() + "\n" + lua.joinpath(f"{name}.lua").read_text()


def register_scripts(client: Any) -> dict[str, ScriptCall]:
    """Every script of the driver, callable as ``scripts[name](keys=..., args=...)`` on
    ``client`` (EVALSHA, loading the script on first use or after the store was flushed)."""
    if isinstance(client, redis.Redis):
        return {name: PooledScript(client, script_source(name)) for name in SCRIPT_NAMES}
    return {name: client.register_script(script_source(name)) for name in SCRIPT_NAMES}


class PooledScript:
    """One script run as EVALSHA on a connection of a standalone client's pool.

    The same contract as redis-py's ``Script`` called on that client: replies come back as
    the client's parser gives them (bytes, integers, nested lists), an error reply raises
    its ``ResponseError``, an unknown script is loaded and run again, a failure to connect
    or a dropped connection is retried at once on a fresh connection
    (``RETRIES_ON_CONNECTION_ERROR`` times), and a timeout is never retried (the script may
    have run). A connection that failed in any way is closed before it goes back to the
    pool (redis-py's connection does that on every error, gevent's timeouts included).
    """

    def __init__(self, client: redis.Redis, source: str) -> None:
        self._pool = client.connection_pool
        self._source = source.encode()
        self._sha = hashlib.sha1(self._source).hexdigest()

    def __call__(self, keys: Sequence[str | bytes], args: Sequence[Any]) -> Any:
        command = _pack("EVALSHA", self._sha, len(keys), *keys, *args)
        try:
            return self._send(command)
        except NoScriptError:
            self._send(_pack("SCRIPT", "LOAD", self._source))
            return self._send(command)

    def _send(self, command: bytes) -> Any:
        attempts = 1 + RETRIES_ON_CONNECTION_ERROR
        for attempt in range(1, attempts + 1):
            connection: Any = self._pool.get_connection()  # a refused connect is not retried
            try:
                connection.send_packed_command([command])
                return connection.read_response()
            except redis.ConnectionError:
                if attempt == attempts:
                    raise
            finally:
                self._pool.release(connection)
        raise AssertionError("unreachable: the last attempt returns or raises")


def _pack(*args: Any) -> bytes:
    """One command in the Redis protocol (hiredis: str, bytes, int and float arguments)."""
    try:
        packed: bytes = hiredis.pack_command(args)
        return packed
    except TypeError as exc:  # as redis-py reports an argument it cannot send
        raise redis.DataError(str(exc)) from exc
