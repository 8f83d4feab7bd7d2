"""The private parts of libraries the server relies on, checked on the installed versions.

Each override below replaces a private step of a library because the public path cost
measurably more CPU (the module of each says how much). A library release that renames or
stops calling one of them would not break the server: the override would just stop being
used, silently. These tests serve a real request through each and fail, naming the override,
when the library no longer calls it. pyproject.toml bounds these libraries to the major versions
checked here.
"""

from __future__ import annotations

import http.client
import inspect
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import gevent.pywsgi
import pytest
import redis
from gunicorn.workers import ggevent

from tests.helpers.gevent_thread import serve_in_thread
from zaqar_delay.cmd import headers, transfer, worker
from zaqar_delay.cmd.headers import Handler, RequestHeaders

CALLS: Counter[str] = Counter()


class SpyHandler(Handler):
    """The server's handler, counting the calls gevent makes to each overridden step."""

    def MessageClass(self, fp: Any, *rest: object) -> RequestHeaders:
        CALLS["MessageClass"] += 1
        return super().MessageClass(fp, *rest)

    def _headers(self) -> Iterator[tuple[str, str]]:
        CALLS["_headers"] += 1
        return super()._headers()

    def get_environ(self) -> dict[str, Any]:
        CALLS["get_environ"] += 1
        return super().get_environ()

    def _sendall(self, data: bytes) -> None:
        CALLS["_sendall"] += 1
        super()._sendall(data)

    def log_request(self) -> None:  # gunicorn's access log needs its config
        pass


class Deferring:
    """A share of a worker that asks to defer its first connection (cmd/balance.Share)."""

    def __init__(self) -> None:
        self.deferred = 0

    def serving(self) -> None:
        pass

    def opened(self) -> None:
        CALLS["do_handle"] += 1

    def closed(self) -> None:
        CALLS["do_close"] += 1

    def should_defer(self) -> bool:
        self.deferred += 1
        return self.deferred == 1


class SpyServer(worker.FairPyWSGIServer):
    def _do_read(self) -> None:
        CALLS["_do_read"] += 1
        super()._do_read()


def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [environ.get("HTTP_X_PROBE", "").encode()]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[SpyServer, Deferring]]:
    share = Deferring()
    server = serve_in_thread(
        lambda: SpyServer(("127.0.0.1", 0), app, handler_class=SpyHandler, log=None, share=share)
    )
    CALLS.clear()
    connection = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=5)
    connection.request("GET", "/", headers={"X-Probe": "seen"})
    response = connection.getresponse()
    assert (response.status, response.read()) == (200, b"seen")
    connection.close()
    yield server, share


@pytest.mark.parametrize(
    ("step", "module"),
    [
        ("MessageClass", headers),
        ("_headers", headers),
        ("get_environ", transfer),
        ("_sendall", transfer),
    ],
)
def test_gevent_s_wsgi_handler_still_calls_each_overridden_step(
    served: tuple[SpyServer, Deferring], step: str, module: object
) -> None:
    assert hasattr(gevent.pywsgi.WSGIHandler, step), f"gevent has no WSGIHandler.{step}"
    assert CALLS[step] >= 1, f"gevent no longer calls WSGIHandler.{step}: {module} is dead code"


def test_gevent_still_drops_an_unread_body_through_the_input_s_discard() -> None:
    # cmd/transfer.TimedInput bounds that read in time: a rename would leave it unbounded.
    after_the_application = inspect.getsource(gevent.pywsgi.WSGIHandler.handle_one_response)
    assert "self.wsgi_input._discard()" in after_the_application, "cmd/transfer.py must follow"


@pytest.mark.parametrize("step", ["_do_read", "do_handle", "do_close"])
def test_gevent_s_accept_loop_still_calls_each_overridden_step(
    served: tuple[SpyServer, Deferring], step: str
) -> None:
    # do_close runs once the server has seen the client close: wait for it, with a deadline.
    deadline = time.monotonic() + 5
    while CALLS[step] < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert CALLS[step] >= 1, f"gevent no longer calls StreamServer.{step}: cmd/worker.py is dead"


def test_a_deferred_connection_is_accepted_through_gevent_s_pause_and_timer(
    served: tuple[SpyServer, Deferring],
) -> None:
    _, share = served
    # The first connection was deferred (stop_accepting and a loop timer), then accepted.
    assert share.deferred >= 1
    assert CALLS["_do_read"] >= 2


def test_gunicorn_s_gevent_worker_still_takes_a_server_class_and_a_handler() -> None:
    assert issubclass(worker.Worker, ggevent.GeventPyWSGIWorker)
    assert "server_class" in vars(ggevent.GeventPyWSGIWorker)
    assert "wsgi_handler" in vars(ggevent.GeventPyWSGIWorker)
    assert issubclass(Handler, ggevent.PyWSGIHandler)


def test_redis_py_still_has_the_readiness_check_the_cluster_client_replaces() -> None:
    from redis._parsers import hiredis

    check = hiredis._socket_can_read
    assert list(inspect.signature(check).parameters) == ["sock", "timeout"], (
        "redis-py changed _socket_can_read: storage/redis/readiness.py must follow"
    )


def test_redis_py_still_has_the_connection_calls_the_script_connections_use() -> None:
    for name in ("connect", "disconnect", "send_packed_command", "read_response"):
        assert callable(getattr(redis.Connection, name)), name
    pool = redis.ConnectionPool()
    for name in ("connection_class", "connection_kwargs", "max_connections"):
        assert hasattr(pool, name), f"redis-py's pool has no {name}: storage/redis/script_calls.py"
