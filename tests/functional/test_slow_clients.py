"""Clients that stall after their request's head: a body that does not come (or comes a byte at
a time), a body the application does not read, a response or a WebSocket frame nobody takes.
Each would hold one of a worker's connections for ever; a real server with a transfer timeout
of one second closes them (cmd/transfer.py)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import websocket

from testbed.processes import ServiceProcess
from tests.helpers.raw_http import post_large_messages, received_until_closed

pytestmark = pytest.mark.functional

HEADERS = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c", "X-Project-ID": "slow"}
LARGE_BODY = 1_000_000
LARGE_MESSAGES = 10


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    conf = Path(tmp_path_factory.mktemp("slow")) / "slow.conf"
    conf.write_text(
        "[server]\ntransfer_timeout = 1\n"
        f"[transport]\nmax_messages_post_size = {2 * LARGE_BODY}\n"
        "[drivers:transport:websocket]\nping_interval = 30\n"
    )
    started = ServiceProcess(args=["--config-file", str(conf)], workers=1).start()
    yield started
    started.stop()


def head(method: str, path: str, *fields: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: q", *(f"{k}: {v}" for k, v in HEADERS.items())]
    return ("\r\n".join([*lines, *fields]) + "\r\n\r\n").encode()


def queues(service: ServiceProcess) -> list[str]:
    listed = requests.get(f"{service.url}/v2/queues", headers=HEADERS, timeout=10)
    return [queue["name"] for queue in listed.json()["queues"]]


def still_serves(service: ServiceProcess) -> bool:
    return requests.get(f"{service.url}/", timeout=10).status_code == 300


@pytest.mark.parametrize(
    ("framing", "sent"),
    [
        ("Content-Length: 40", b""),  # announced, never sent
        ("Content-Length: 40", b'{"_default_m'),  # sent in part, then nothing
        ("Transfer-Encoding: chunked", b"5\r\n"),  # a chunk's size and no more
    ],
)
def test_a_body_that_does_not_arrive_is_answered_408_and_writes_nothing(
    service: ServiceProcess, framing: str, sent: bytes
) -> None:
    with socket.create_connection(("127.0.0.1", service.port), timeout=10) as client:
        client.sendall(head("PUT", "/v2/queues/stalled", framing) + sent)
        answer = received_until_closed(client)  # the client never ends its side
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    document = json.loads(answer.partition(b"\r\n\r\n")[2])
    assert document["title"] == "Request timeout"
    assert "not received in time" in document["description"]
    assert "stalled" not in queues(service)
    assert still_serves(service)


def test_a_body_sent_a_byte_at_a_time_is_cut_off(service: ServiceProcess) -> None:
    body = b'{"metadata": "' + b"x" * 100 + b'"}'
    with socket.create_connection(("127.0.0.1", service.port), timeout=10) as client:
        client.sendall(head("PUT", "/v2/queues/trickled", f"Content-Length: {len(body)}"))
        client.setblocking(False)
        sent = 0
        answer = b""
        # A byte every 0.2 s: each read of the server's gets one, the whole never comes in time.
        while sent < len(body):
            client.sendall(body[sent : sent + 1])
            sent += 1
            time.sleep(0.2)
            try:
                answer = client.recv(65536)
            except BlockingIOError:
                continue
            break
        client.setblocking(True)
        answer += received_until_closed(client)
    assert sent < len(body), "the server waited for the whole body"
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert "trickled" not in queues(service)


def test_a_body_the_route_does_not_read_is_bounded_too(service: ServiceProcess) -> None:
    # GET / reads no body: the server reads (and drops) it before the next request.
    with socket.create_connection(("127.0.0.1", service.port), timeout=10) as client:
        client.sendall(b"GET / HTTP/1.1\r\nHost: q\r\nContent-Length: 100\r\n\r\n")
        answer = received_until_closed(client)
    assert answer.startswith(b"HTTP/1.1 300"), answer[:200]
    assert answer.count(b"HTTP/1.1") == 1


@pytest.fixture(scope="module")
def large_queue(service: ServiceProcess) -> str:
    """A queue whose listing is far larger than the sockets on both sides buffer."""
    post_large_messages(service.url, "large", HEADERS, LARGE_MESSAGES, LARGE_BODY)
    return "large"


def test_a_response_nobody_takes_is_dropped(service: ServiceProcess, large_queue: str) -> None:
    with socket.socket() as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.settimeout(10)
        client.connect(("127.0.0.1", service.port))
        client.sendall(head("GET", f"/v2/queues/{large_queue}/messages?echo=true&limit=20"))
        time.sleep(3)  # reads nothing for three transfer timeouts
        answer = received_until_closed(client)
    announced = int(answer.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    assert announced > LARGE_BODY * LARGE_MESSAGES
    # The server gave up: the client had its head and part of its body, then the close.
    assert len(answer.partition(b"\r\n\r\n")[2]) < announced
    assert still_serves(service)


def test_a_websocket_session_may_idle_past_the_transfer_timeout(service: ServiceProcess) -> None:
    session = websocket.create_connection(f"ws://127.0.0.1:{service.port}/", timeout=10)
    try:
        time.sleep(3)  # sends nothing: its reads are the session's, bounded by its pings
        session.send(json.dumps({"action": "ping_node", "headers": HEADERS, "body": {}}))
        assert json.loads(session.recv())["headers"]["status"] == 204
    finally:
        session.close()


def test_a_websocket_session_that_takes_no_frames_is_closed(
    service: ServiceProcess, large_queue: str
) -> None:
    requested = 40
    session = websocket.create_connection(
        f"ws://127.0.0.1:{service.port}/",
        timeout=10,
        sockopt=((socket.SOL_SOCKET, socket.SO_RCVBUF, 4096),),
    )
    try:
        page = {"queue_name": large_queue, "echo": True, "limit": 20}
        for _ in range(requested):  # about 10 MB of answers each, none of them read
            session.send(json.dumps({"action": "message_list", "headers": HEADERS, "body": page}))
        time.sleep(3)
        answered = 0
        with pytest.raises(websocket.WebSocketConnectionClosedException):
            while True:
                session.recv()
                answered += 1
        assert answered < requested
    finally:
        session.close()
    assert still_serves(service)
