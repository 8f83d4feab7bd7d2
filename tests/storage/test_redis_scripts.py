"""A script run on a standalone client's pool (storage/redis/script_calls.py): the contract of
redis-py's ``Script`` on a real redis-server, including its faults."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import redis

from testbed.processes import RedisServer
from zaqar_delay.storage.redis import layout, scripts
from zaqar_delay.storage.redis.connect import redis_client
from zaqar_delay.storage.redis.script_calls import PooledScript, ScriptConnections
from zaqar_delay.storage.redis.scripts import (
    SCRIPT_NAMES,
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


def script_on(client: Any, source: str) -> PooledScript:
    return PooledScript(ScriptConnections(client.connection_pool), source)


def test_standalone_clients_run_the_driver_scripts_on_connections_of_their_own(
    client: Any,
) -> None:
    scripts, connections = register_scripts(client)
    assert isinstance(connections, ScriptConnections)
    assert all(isinstance(script, PooledScript) for script in scripts.values())


def test_a_script_answers_as_redis_py_would(client: Any, key: str) -> None:
    script = script_on(client, COUNT_AND_ECHO)
    assert script(keys=[key], args=["é"]) == [b"1", "é".encode()]
    assert script(keys=[key], args=[2.5]) == [b"2", b"2.5"]
    with pytest.raises(redis.ResponseError, match="boom"):
        script_on(client, "return redis.error_reply('boom')")(keys=[], args=[])
    with pytest.raises(redis.DataError):
        script(keys=[key], args=[None])
    assert client.get(key) == b"2", "a refused argument must not reach the store"


def test_a_script_the_store_forgot_is_loaded_again(client: Any, key: str) -> None:
    script = script_on(client, COUNT_AND_ECHO)
    script(keys=[key], args=["a"])
    client.script_flush()
    sha = script._sha
    assert client.script_exists(sha) == [False], "the flush did not drop the script"
    assert script(keys=[key], args=["b"]) == [b"2", b"b"]
    assert client.script_exists(sha) == [True]


def client_ids(admin: Any) -> set[int]:
    return {c["id"] for c in admin.client_list()}


def test_an_idle_connection_the_store_dropped_is_replaced_before_the_call_is_sent(
    redis_server: RedisServer, key: str
) -> None:
    admin = redis.Redis(port=redis_server.port)
    client = redis_client(redis_server.url, socket_timeout=5)
    connections = ScriptConnections(client.connection_pool)
    script = PooledScript(connections, COUNT_AND_ECHO)
    before = client_ids(admin)
    assert script(keys=[key], args=["x"]) == [b"1", b"x"]
    [idle] = client_ids(admin) - before
    assert admin.client_kill_filter(_id=idle) == 1
    assert idle not in client_ids(admin), "the store did not drop the idle connection"

    assert script(keys=[key], args=["y"]) == [b"2", b"y"]

    assert admin.get(key) == b"2", "each call ran the script once"
    client.close()


class ReplyDroppingProxy:
    """A TCP proxy to a redis-server that, once armed, closes the client's connection when
    the next reply arrives instead of passing it on: the store ran the command, the client
    never hears of it."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed = threading.Event()
        self.dropped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream_port))
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, target: socket.socket, replies: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if replies and self.armed.is_set():
                    self.armed.clear()
                    self.dropped.set()
                    break
                target.sendall(data)
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self.listener.close()


def test_a_call_whose_reply_was_lost_is_not_sent_again(redis_server: RedisServer, key: str) -> None:
    proxy = ReplyDroppingProxy(redis_server.port)
    client = redis_client(f"redis://127.0.0.1:{proxy.port}/0", socket_timeout=5)
    try:
        script = PooledScript(ScriptConnections(client.connection_pool), COUNT_AND_ECHO)
        assert script(keys=[key], args=["a"]) == [b"1", b"a"]
        proxy.armed.set()
        with pytest.raises(redis.ConnectionError):
            script(keys=[key], args=["b"])
        assert proxy.dropped.is_set(), "the proxy did not drop the reply"
        admin = redis.Redis(port=redis_server.port)
        assert admin.get(key) == b"2", "the store ran the call once, and it was not sent again"
        assert script(keys=[key], args=["c"]) == [b"3", b"c"], "a fresh connection serves"
    finally:
        client.close()
        proxy.close()


def test_an_error_reply_leaves_its_connection_in_use(client: Any, key: str) -> None:
    connections = ScriptConnections(client.connection_pool)
    with pytest.raises(redis.ResponseError, match="boom"):
        PooledScript(connections, "return redis.error_reply('boom')")(keys=[], args=[])
    [connection] = connections._idle
    assert PooledScript(connections, COUNT_AND_ECHO)(keys=[key], args=["a"]) == [b"1", b"a"]
    assert connections._idle == [connection], "the reply was read whole: the same connection"


def test_a_call_waits_for_a_connection_when_all_are_out(redis_server: RedisServer) -> None:
    pool = redis.BlockingConnectionPool(port=redis_server.port, max_connections=1, timeout=0.3)
    connections = ScriptConnections(pool)
    held = connections.checkout()
    started = time.monotonic()
    with pytest.raises(redis.ConnectionError, match="No connection available"):
        connections.checkout()
    assert time.monotonic() - started >= 0.3, "it gave up before the pool's timeout"

    taken: list[Any] = []
    waiter = threading.Thread(target=lambda: taken.append(connections.checkout()))
    waiter.start()
    # Once the waiter is counted as waiting, the connection given back below is the one it
    # gets.
    deadline = time.monotonic() + 10
    while not connections._waiting:
        assert time.monotonic() < deadline, "the second checkout never waited"
        assert not taken, "a second connection was made past max_connections"
        time.sleep(0.01)
    assert not taken, "a second connection was made past max_connections"
    connections.give_back(held)
    waiter.join(1)
    assert taken == [held]
    connections.discard(held)
    assert connections.checkout() is not held, "a discarded connection was handed out again"
    pool.disconnect()


def test_a_connection_given_back_after_close_is_closed(client: Any, key: str) -> None:
    connections = ScriptConnections(client.connection_pool)
    PooledScript(connections, COUNT_AND_ECHO)(keys=[key], args=["a"])
    out = connections.checkout()
    idle = PooledScript(connections, COUNT_AND_ECHO)
    idle(keys=[key], args=["b"])
    [kept] = connections._idle
    connections.close()
    assert kept._sock is None and connections._idle == []
    connections.give_back(out)
    assert out._sock is None and connections._idle == []


def test_a_forked_child_does_not_use_the_parents_connections(client: Any, key: str) -> None:
    connections = ScriptConnections(client.connection_pool)
    script = PooledScript(connections, COUNT_AND_ECHO)
    script(keys=[key], args=["parent"])
    [parents] = connections._idle
    pid = os.fork()
    if pid == 0:  # the child: its own connection, the parent's left alone
        try:
            fine = connections._idle == [] and script(keys=[key], args=["child"])[1] == b"child"
            os._exit(0 if fine and connections._idle[0] is not parents else 1)
        except BaseException:  # noqa: BLE001 - the child must never return into pytest
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert connections._idle == [parents]
    assert script(keys=[key], args=["parent again"]) == [b"3", b"parent again"]


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
        script_on(client, slow)(keys=[key], args=[])
    # Redis serves one command at a time: this read waits for the script, and for a repeat of
    # it, which the client would have sent before raising.
    assert admin.get(key) == b"1", "a timed-out script was run again"
    client.close()


# -- the facts shared with Python ---------------------------------------------------------------


def test_the_scripts_take_the_shared_facts_from_the_generated_prelude_only() -> None:
    lua = resources.files("zaqar_delay.storage.redis").joinpath("lua")
    names = layout.constants()
    for path in lua.iterdir():
        text = path.read_text()
        for name in names:
            assert not re.search(rf"local [\w, ]*\b{name}\b", text), (path.name, name)
        # Metadata and option names are the prelude's P_* and O_* constants.
        assert "['_" not in text, path.name
    for script in SCRIPT_NAMES:
        source = script_source(script)
        for name, value in names.items():
            defined = source.count(f"local {name} = ")
            assert defined <= 1, (script, name)
            if defined:
                assert f"local {name} = {value}\n" in source


def test_the_record_head_reads_the_same_in_lua_and_python() -> None:
    assert layout.lua_struct_format(struct.Struct(">QQQIHB")) == ">I8I8I8I4I2B"
    assert layout.MAX_CLAIM_COUNT == 65535


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


def test_many_calls_go_in_one_packet_and_answer_in_order(client: Any, key: str) -> None:
    connections = ScriptConnections(client.connection_pool)
    script = PooledScript(connections, COUNT_AND_ECHO)
    script(keys=[key], args=["first"])
    [connection] = connections._idle
    sent: list[Any] = []
    send = connection.send_packed_command
    connection.send_packed_command = lambda packets, **kw: (
        sent.append(packets),
        send(packets, **kw),
    )
    assert script.many([([key], ["a"]), ([key], ["b"]), ([key], ["c"])]) == [
        [b"2", b"a"],
        [b"3", b"b"],
        [b"4", b"c"],
    ]
    assert len(sent) == 1 and len(sent[0]) == 3, "the three calls were not sent as one packet"
    assert connections._idle == [connection]
    assert script.many([]) == []
    assert len(sent) == 1, "no call, nothing sent"


def test_many_calls_with_an_error_reply_run_the_others_and_raise_it(client: Any, key: str) -> None:
    connections = ScriptConnections(client.connection_pool)
    fails_on_b = (
        "if ARGV[1] == 'b' then return redis.error_reply('boom') end "
        "return redis.call('INCR', KEYS[1])"
    )
    script = PooledScript(connections, fails_on_b)
    with pytest.raises(redis.ResponseError, match="boom"):
        script.many([([key], ["a"]), ([key], ["b"]), ([key], ["c"])])
    assert client.get(key) == b"2", "the calls around the refused one did not both run"
    [connection] = connections._idle
    assert script(keys=[key], args=["d"]) == 3, "the connection is out of step"
    assert connections._idle == [connection]


def test_many_calls_of_a_script_the_store_forgot_each_run_once(client: Any, key: str) -> None:
    script = script_on(client, COUNT_AND_ECHO)
    script(keys=[key], args=["a"])
    client.script_flush()
    assert client.script_exists(script._sha) == [False], "the flush did not drop the script"
    assert script.many([([key], ["b"]), ([key], ["c"])]) == [[b"2", b"b"], [b"3", b"c"]]
    assert client.get(key) == b"3"


def test_many_calls_whose_sending_failed_part_way_are_not_sent_again(client: Any, key: str) -> None:
    connections = ScriptConnections(client.connection_pool)
    script = PooledScript(connections, COUNT_AND_ECHO)
    script(keys=[key], args=["loaded"])
    [connection] = connections._idle
    send = connection.send_packed_command

    def send_the_first_then_fail(packets: list[bytes], **kwargs: Any) -> None:
        send(packets[:1], **kwargs)
        raise redis.ConnectionError("the connection broke after the first call")

    connection.send_packed_command = send_the_first_then_fail
    with pytest.raises(redis.ConnectionError, match="after the first call"):
        script.many([([key], ["a"]), ([key], ["b"])])
    assert client.get(key) == b"2", "the first call did not run, or ran twice"
    assert connections._idle == [], "the broken connection was given back"
