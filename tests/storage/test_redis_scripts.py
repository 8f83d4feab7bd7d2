"""A script run on a standalone client's pool (storage/redis/scripts.py): the contract of
redis-py's ``Script`` on a real redis-server, including its faults."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.processes import RedisServer
from zaqar_delay.storage.redis import scripts
from zaqar_delay.storage.redis.connect import redis_client
from zaqar_delay.storage.redis.scripts import (
    SCRIPT_NAMES,
    PooledScript,
    lib_for,
    register_scripts,
    script_source,
)

LIB_LUA = (Path(scripts.__file__).parent / "lua" / "lib.lua").read_text()

COUNT_AND_ECHO = "redis.call('INCR', KEYS[1]) return {redis.call('GET', KEYS[1]), ARGV[1]}"


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[Any]:
    client = redis_client(redis_server.url, socket_timeout=5)
    yield client
    client.close()


@pytest.fixture
def key() -> str:
    return f"scripts-test:{uuid.uuid4().hex}"


def test_standalone_clients_run_the_driver_scripts_on_their_pool(client: Any) -> None:
    scripts = register_scripts(client)
    assert all(isinstance(script, PooledScript) for script in scripts.values())


def test_a_script_answers_as_redis_py_would(client: Any, key: str) -> None:
    script = PooledScript(client, COUNT_AND_ECHO)
    assert script(keys=[key], args=["é"]) == [b"1", "é".encode()]
    assert script(keys=[key], args=[2.5]) == [b"2", b"2.5"]
    with pytest.raises(redis.ResponseError, match="boom"):
        PooledScript(client, "return redis.error_reply('boom')")(keys=[], args=[])
    with pytest.raises(redis.DataError):
        script(keys=[key], args=[None])
    assert client.get(key) == b"2", "a refused argument must not reach the store"


def test_a_script_the_store_forgot_is_loaded_again(client: Any, key: str) -> None:
    script = PooledScript(client, COUNT_AND_ECHO)
    script(keys=[key], args=["a"])
    client.script_flush()
    sha = script._sha
    assert client.script_exists(sha) == [False], "the flush did not drop the script"
    assert script(keys=[key], args=["b"]) == [b"2", b"b"]
    assert client.script_exists(sha) == [True]


class KillingPool(redis.BlockingConnectionPool):
    """Hands out one connection the store has just closed (after the pool's own readiness
    check passed): the store restarting between checkout and send."""

    def __init__(self, admin: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.admin = admin
        self.killed: list[int] = []

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        connection = super().get_connection(*args, **kwargs)
        if not self.killed:
            connection.send_command("CLIENT", "ID")
            client_id = int(connection.read_response())
            assert self.admin.client_kill_filter(_id=client_id) == 1
            self.killed.append(client_id)
        return connection


def test_a_dropped_connection_is_retried_once_on_a_fresh_one(
    redis_server: RedisServer, key: str
) -> None:
    admin = redis.Redis(port=redis_server.port)
    pool = KillingPool(admin, host="127.0.0.1", port=redis_server.port, socket_timeout=5)
    script = PooledScript(redis.Redis(connection_pool=pool), COUNT_AND_ECHO)

    assert script(keys=[key], args=["x"]) == [b"1", b"x"]

    [killed] = pool.killed
    assert killed not in {c["id"] for c in admin.client_list()}, "the connection was not closed"
    assert admin.get(key) == b"1", "the script ran once"


def test_a_timed_out_script_is_not_sent_again(redis_server: RedisServer, key: str) -> None:
    # Runs ~0.6 s of store time, counting its runs first; the client waits 0.2 s. (The
    # iteration cap ends it should a store ever freeze TIME inside scripts.)
    slow = """
    redis.call('INCR', KEYS[1])
    local t = redis.call('TIME')
    local start, n = t[1] * 1000000 + t[2], 0
    repeat
        t = redis.call('TIME')
        n = n + 1
    until t[1] * 1000000 + t[2] - start > 600000 or n > 5000000
    return 1
    """
    client = redis_client(redis_server.url, socket_timeout=0.2)
    admin = redis.Redis(port=redis_server.port)
    with pytest.raises(redis.TimeoutError):
        PooledScript(client, slow)(keys=[key], args=[])
    time.sleep(0.8)  # the script finishes in the store
    assert admin.get(key) == b"1", "a timed-out script was run again"
    client.close()


# -- the parts of lib.lua each script carries ---------------------------------------------------

LIB = """-- lib: a header comment

local A, B = 1, 2

-- The comment of C mentions unused_helper, which C does not call.
local C = 'unused_helper'
local function unused_helper()
    return B
end
local function double(n)
    return n * A * 2  -- not C
end
"""


def test_a_script_carries_the_lib_statements_it_uses_in_lib_order() -> None:
    assert (
        lib_for(LIB, "return double(3)")
        == "local A, B = 1, 2\n\n" + LIB[LIB.index("local function double") :]
    )
    assert lib_for(LIB, "return unused_helper()") == (
        "local A, B = 1, 2\n\n"
        + LIB[LIB.index("local function unused_helper") : LIB.index("local function double")]
    )
    assert "local C" in lib_for(LIB, "return C")
    assert lib_for(LIB, "return 'double' -- double") == ""


def test_an_unknown_top_level_statement_in_lib_is_refused() -> None:
    with pytest.raises(ValueError, match="unexpected top-level statement"):
        lib_for("local function f() end\nlocal x; y = 2\n", "return f()")


def test_every_script_loads_with_only_the_helpers_it_uses(client: Any) -> None:
    assert len(script_source("delete")) < len(LIB_LUA), "delete.lua carries all of lib.lua"
    assert "local function take_claimable" not in script_source("delete")
    assert "local function take_claimable" in script_source("claim")
    for name in SCRIPT_NAMES:
        source = script_source(name)
        assert client.script_load(source) == hashlib.sha1(source.encode()).hexdigest()
