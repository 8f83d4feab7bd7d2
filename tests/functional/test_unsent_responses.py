"""Clients that ask for large listings and read none of them, against a real server: past
``[server] max_unsent_responses`` the worker closes the connections whose responses have
waited longest, while a client that reads its answer gets it whole (cmd/unsent.py). The
transfer timeout is left at 60 s, so that only the limit can close them."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from testbed.processes import ServiceProcess
from tests.helpers.raw_http import post_large_messages, received_until_closed

pytestmark = pytest.mark.functional

HEADERS = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c", "X-Project-ID": "unread"}
MESSAGES = 10
# Each listing is about 10 MB: more than the kernel's send buffer takes off the server's
# hands on loopback (up to 4 MiB), and ten times the limit.
PAD = 1_000_000
STALLED = 3
LISTING = f"/v2/queues/large/messages?echo=true&limit={MESSAGES}"


def serve(tmp_path: Path, limit_mib: int) -> Iterator[ServiceProcess]:
    conf = tmp_path / "unsent.conf"
    conf.write_text(
        f"[server]\nmax_unsent_responses = {limit_mib}\n"
        f"[transport]\nmax_messages_post_size = {2 * PAD}\n"
    )
    started = ServiceProcess(args=["--config-file", str(conf)], workers=1).start()
    post_large_messages(started.url, "large", HEADERS, MESSAGES, PAD)
    yield started
    started.stop()


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    yield from serve(tmp_path_factory.mktemp("limited"), 1)


@pytest.fixture(scope="module")
def unlimited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    yield from serve(tmp_path_factory.mktemp("unlimited"), 0)


def stalled_listings(service: ServiceProcess) -> list[socket.socket]:
    """Connections that ask for the listing and read nothing (their receive buffers are
    small), each checked to hold far less than its answer a moment later."""
    lines = [f"GET {LISTING} HTTP/1.1", "Host: q", *(f"{k}: {v}" for k, v in HEADERS.items())]
    clients = []
    for _ in range(STALLED):
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.settimeout(20)
        client.connect(("127.0.0.1", service.port))
        client.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        clients.append(client)
    time.sleep(0.5)
    for client in clients:
        waiting = client.recv(2**24, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        assert 0 < len(waiting) < MESSAGES * PAD / 10  # the server holds the rest
    return clients


def answer_of(client: socket.socket) -> tuple[int, bytes]:
    """The Content-Length a stalled client was announced, and the body bytes it then gets
    (up to that length, or until the server closes the connection)."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += client.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    announced = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < announced and (chunk := client.recv(65536)):
        body += chunk
    return announced, body


def test_past_the_limit_stalled_clients_are_closed_and_readers_are_served(
    limited: ServiceProcess,
) -> None:
    clients = stalled_listings(limited)
    time.sleep(1.5)  # each stalled send a second old, the worker past its 1 MiB
    listed = requests.get(limited.url + LISTING, headers=HEADERS, timeout=10)
    assert listed.status_code == 200
    assert len(listed.json()["messages"]) == MESSAGES  # a reader's answer, whole
    for client in clients:
        with client:
            announced, body = answer_of(client)
            assert announced > MESSAGES * PAD
            assert len(body) < announced  # cut short
            assert received_until_closed(client) == b""  # and the connection closed
    assert "max_unsent_responses" in limited.log()


def test_without_a_limit_stalled_clients_keep_their_answers(unlimited: ServiceProcess) -> None:
    clients = stalled_listings(unlimited)
    time.sleep(1.5)
    for client in clients:
        with client:
            announced, body = answer_of(client)
            assert len(body) == announced
            assert len(json.loads(body)["messages"]) == MESSAGES
    assert "max_unsent_responses" not in unlimited.log()
