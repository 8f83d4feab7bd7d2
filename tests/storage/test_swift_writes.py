"""When the Swift driver sends a write again: after Swift refused the connection's token
(authenticated again, then sent), and never after a failure that may have left the write
applied (reported, with Swift's answer)."""

from __future__ import annotations

import http.server
import threading
import uuid
from collections.abc import Iterator

import pytest
import requests

from testbed.swift_aio import REFUSED_USER, SwiftAllInOne
from zaqar_delay import errors
from zaqar_delay.storage.swift.access import SwiftAccess, access_from_uri
from zaqar_delay.storage.swift.connect import SwiftClient


def refused(client: SwiftClient, container: str) -> bool:
    """Whether Swift refuses the client's current token (on a read, which swiftclient would
    not hide)."""
    connection = client._connection()
    answer = requests.head(
        f"{connection.url}/{container}", headers={"X-Auth-Token": connection.token}, timeout=5
    )
    return answer.status_code == 401


@pytest.mark.parametrize("write", ["put", "create"])
def test_a_write_with_a_refused_token_is_sent_again_once_authenticated(
    swift_aio: SwiftAllInOne, write: str
) -> None:
    client = SwiftClient(access_from_uri(swift_aio.store_uri_as(REFUSED_USER)))
    container = f"tokens-{uuid.uuid4().hex}"
    try:
        client.put_container(container)
        client.put(container, "before", b"1", "x")
        swift_aio.forget_token(client._connection().token)
        assert refused(client, container), "Swift still accepts the token"
        if write == "put":
            client.put(container, "after", b"2", "x")
        else:
            assert client.create(container, "after", b"2", "x") is True
        assert client.get(container, "after", newest=True) is not None
        assert not refused(client, container)
    finally:
        client.close()


class RefusingSwift(http.server.BaseHTTPRequestHandler):
    """Authenticates anyone (tempauth's v1.0 answer) and answers every PUT 503."""

    puts: list[str]

    def do_GET(self) -> None:
        host, port = self.server.server_address[:2]
        self.send_response(200)
        self.send_header("X-Storage-Url", f"http://{host!s}:{port}/v1/AUTH_test")
        self.send_header("X-Auth-Token", "AUTH_tk")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.puts.append(self.path)
        body = b"<html><h1>Service Unavailable</h1></html>"
        self.send_response(503, "Service Unavailable")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def refusing_swift() -> Iterator[tuple[SwiftAccess, list[str]]]:
    """A Swift that refuses every write, and the PUTs it was sent."""
    puts: list[str] = []
    handler = type("Handler", (RefusingSwift,), {"puts": puts})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    try:
        yield SwiftAccess(f"http://127.0.0.1:{port}/auth/v1.0", "test:tester", "t", "test"), puts
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("write", ["put", "create"])
def test_a_write_swift_refused_is_reported_with_its_answer_and_not_sent_again(
    refusing_swift: tuple[SwiftAccess, list[str]], write: str
) -> None:
    access, puts = refusing_swift
    client = SwiftClient(access)
    try:
        with pytest.raises(errors.StorageUnavailable) as failure:
            getattr(client, write)("c", "o", b"body", "x")
        assert puts == ["/v1/AUTH_test/c/o"], "the write was not sent once"
        assert "503 Service Unavailable" in str(failure.value)
    finally:
        client.close()
