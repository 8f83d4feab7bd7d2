"""The server's gevent handler on a real gevent WSGI server (zaqar_delay/cmd/headers.py):
responses of every shape arrive whole; request headers reach the environ as gevent puts them
there; the access log record is built only for an access log."""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from gevent import pywsgi

from tests.helpers.gevent_thread import serve_in_thread
from zaqar_delay.cmd.headers import Handler

LARGE = 100_000


class QuietHandler(Handler):
    def log_request(self) -> None:  # gunicorn's access log needs its config; not tested here
        pass


Start = Callable[[str, list[tuple[str, str]]], Any]


def app(environ: dict[str, Any], start_response: Start) -> Iterable[bytes]:
    path = environ["PATH_INFO"]
    if path == "/small":
        start_response("201 Created", [("Content-Type", "application/json")])
        return [b'{"resources": ["m1"]}']
    if path == "/empty":
        start_response("204 No Content", [])
        return []
    if path == "/environ":
        start_response("200 OK", [("Content-Type", "application/json")])
        seen = {k: v for k, v in environ.items() if k.startswith(("HTTP_", "CONTENT_"))}
        return [json.dumps(seen).encode()]
    if path == "/large":
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return [b"x" * LARGE]
    start_response("200 OK", [("Content-Type", "text/plain")])
    return (part for part in (b"one,", b"two,", b"three"))  # no length: chunked


@pytest.fixture(scope="module")
def server() -> Iterator[pywsgi.WSGIServer]:
    yield serve_in_thread(
        lambda: pywsgi.WSGIServer(("127.0.0.1", 0), app, handler_class=QuietHandler, log=None)
    )


def get(server: pywsgi.WSGIServer, path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=5)
    connection.request("GET", path)
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, body


@pytest.mark.parametrize(
    ("path", "status", "body"),
    [
        ("/small", 201, b'{"resources": ["m1"]}'),
        ("/empty", 204, b""),
        ("/large", 200, b"x" * LARGE),
        ("/stream", 200, b"one,two,three"),  # chunked
    ],
)
def test_each_response_arrives_whole(
    server: pywsgi.WSGIServer, path: str, status: int, body: bytes
) -> None:
    assert get(server, path) == (status, body)


def test_request_headers_reach_the_environ_as_gevent_puts_them(
    server: pywsgi.WSGIServer,
) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=5)
    connection.putrequest("POST", "/environ", skip_host=True, skip_accept_encoding=True)
    for name, value in [
        ("Host", "q"),
        ("X-Project-ID", " p1 "),
        ("Client_ID", "dropped: an underscore in the name"),
        ("Content-Type", "application/json"),
        ("Content-Length", "2"),
        ("Accept", "application/json"),
        ("accept", "text/plain"),
    ]:
        connection.putheader(name, value)
    connection.endheaders(b"{}")
    environ = json.loads(connection.getresponse().read())
    connection.close()
    assert environ == {
        "HTTP_HOST": "q",
        "HTTP_X_PROJECT_ID": "p1",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": "2",
        "HTTP_ACCEPT": "application/json,text/plain",
    }


class RecordingLog:
    def __init__(self, enabled: bool) -> None:
        self.access_log_enabled = enabled
        self.records: list[Any] = []

    def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
        self.records.append((resp.status, environ["PATH_INFO"]))


@pytest.mark.parametrize("enabled", [True, False])
def test_the_access_log_record_is_built_only_for_an_access_log(enabled: bool) -> None:
    handler = Handler.__new__(Handler)  # the handler's state after a request, no socket
    log = RecordingLog(enabled)
    handler.server = type("Server", (), {"log": log})()
    handler.time_start, handler.time_finish = 1.0, 1.25
    handler.status, handler.response_length = "201 Created", 2
    handler.environ = {"PATH_INFO": "/v2/queues/q/messages"}
    handler.log_request()
    assert log.records == ([("201 Created", "/v2/queues/q/messages")] if enabled else [])
