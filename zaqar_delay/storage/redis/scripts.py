"""Loads the Lua scripts of the driver, each prefixed with the shared ``lib.lua``, and registers
them on a client: on a standalone client (embedded, ``redis://``, ``rediss://``, ``unix://``)
as :class:`~zaqar_delay.storage.redis.script_calls.PooledScript` calls, one round trip each
(``script_calls.py`` says why); on a cluster client as redis-py's ``Script``, which routes by
key slot.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from importlib import resources
from typing import Any, Protocol

import redis

from zaqar_delay.storage.redis import layout
from zaqar_delay.storage.redis.acks import READ_ONLY_SCRIPTS, ReplicaAcks
from zaqar_delay.storage.redis.script_calls import PooledScript, ScriptConnections

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
    "edit",
    "delete_many",
    "pop",
    "stats",
    "count",
    "queue",
    "next_claimable",
    "subscription",
    "push",
    "upgrade",
)

#: Runs one script: ``(keys=..., args=...)`` -> the script's reply.
ScriptCall = Callable[..., Any]


@functools.cache
def script_source(name: str) -> str:
    """The full text sent to Redis for script ``name``: the shared constants (``layout``) and
    parts of lib.lua it uses, then the script. Made once per process (reading the files and
    choosing lib.lua's parts for every script took about 11 ms of each driver opened)."""
    lua = resources.files(__package__).joinpath("lua")
    script = lua.joinpath(f"{name}.lua").read_text()
    shared = layout.prelude() + lua.joinpath("lib.lua").read_text()
    return lib_for(shared, script) + "\n" + script


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


class Closable(Protocol):
    def close(self) -> None: ...


def register_scripts(
    client: Any, acks: ReplicaAcks | None = None
) -> tuple[dict[str, ScriptCall], Closable | None]:
    """Every script of the driver, callable as ``scripts[name](keys=..., args=...)`` on
    ``client`` (EVALSHA, loading the script on first use or after the store was flushed), and
    the connections they run on when the driver holds them (closed with the client): on a
    standalone client always, on a cluster client when ``acks`` requires replicas
    (``shards.py``). Scripts that write wait for ``acks``."""
    if isinstance(client, redis.Redis):
        connections = ScriptConnections(client.connection_pool)
        scripts: dict[str, ScriptCall] = {
            name: PooledScript(connections, script_source(name), _acks_for(name, acks))
            for name in SCRIPT_NAMES
        }
        return scripts, connections
    if acks is not None and acks.required:
        from zaqar_delay.storage.redis.shards import RoutedScript, ShardRouter

        router = ShardRouter(client)
        routed: dict[str, ScriptCall] = {
            name: RoutedScript(router, script_source(name), _acks_for(name, acks))
            for name in SCRIPT_NAMES
        }
        return routed, router
    return {name: client.register_script(script_source(name)) for name in SCRIPT_NAMES}, None


def _acks_for(name: str, acks: ReplicaAcks | None) -> ReplicaAcks | None:
    return None if name in READ_ONLY_SCRIPTS else acks
