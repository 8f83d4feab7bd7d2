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
import re
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
    """The full text sent to Redis for script ``name``: the parts of lib.lua it uses, then
    the script."""
    lua = resources.files(__package__).joinpath("lua")
    script = lua.joinpath(f"{name}.lua").read_text()
    return lib_for(lua.joinpath("lib.lua").read_text(), script) + "\n" + script


# lib.lua is a series of top-level ``local`` statements (constants, state, functions), each
# starting at the beginning of a line after the comment lines right above it; the lines up to
# the next one belong to it.
_TOP_LEVEL = re.compile(r"^(?:--.*\n)*local ", re.MULTILINE)
_COMMENTS = re.compile(r"(?:--.*\n)*")
_FUNCTION = re.compile(r"local function (\w+)")
_NAMES = re.compile(r"local ([\w\s,]+?)\s*(?:=|$)", re.MULTILINE)
# Lua tokens that can hold a name: quoted strings and comments are matched whole so that the
# words in them are not taken for names (the scripts use no long brackets).
_TOKEN = re.compile(r"""'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"|--[^\n]*|([A-Za-z_]\w*)""")


def lib_for(lib: str, script: str) -> str:
    """The statements of ``lib`` that ``script`` uses, directly or through other statements,
    in lib's order.

    Redis runs a script's whole text on every call, so each helper it carries is a closure
    made and collected per call: all of lib.lua cost about 8 µs of each call, more than a
    delete's own work. A statement can only use the ones before it (Lua locals are in scope
    after their declaration), so one pass from the end finds them all. Names are read outside
    strings and comments; a name a statement does not need only keeps it, never drops one.
    """
    starts = [m.start() for m in _TOP_LEVEL.finditer(lib)]
    statements = [lib[a:b] for a, b in zip(starts, [*starts[1:], len(lib)], strict=True)]
    needed = _names_used(script)
    kept: list[str] = []
    for statement in reversed(statements):
        if _defined_names(statement) & needed:
            kept.append(statement)
            needed |= _names_used(statement)
    return "".join(reversed(kept))


def _names_used(code: str) -> set[str]:
    return {name for name in _TOKEN.findall(code) if name}


def _defined_names(statement: str) -> set[str]:
    statement = statement[_COMMENTS.match(statement).end() :]  # type: ignore[union-attr]
    function = _FUNCTION.match(statement)
    if function:
        return {function.group(1)}
    names = _NAMES.match(statement)
    if names is None:
        raise ValueError(f"lib.lua: unexpected top-level statement {statement[:60]!r}")
    return {name.strip() for name in names.group(1).split(",")}


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
