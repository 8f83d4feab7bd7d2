"""Of two concurrent create-only writes of one object, one is kept, even when every commit is
slower than ``settle_ms``: the settle wait grows with the creation's own round trip."""

from __future__ import annotations

import dataclasses
import re
import socket
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator

import pytest
import swiftclient

from testbed.swift_aio import SwiftAllInOne
from zaqar_delay.storage.swift.access import SwiftAccess, access_from_uri
from zaqar_delay.storage.swift.connect import SwiftClient

SETTLE_MS = 100
# How long each writer's network holds a PUT's body after its headers: the object servers
# check that the object is absent when the headers arrive, and commit once the body does.
# The second writer starts after the first one's check and before its commit, and commits
# last, long after the first one's commit plus settle_ms.
FIRST_BODY_DELAY_S = 1.0
SECOND_START_S = 0.2
SECOND_BODY_DELAY_S = 1.5


def _spawn(target: Callable[..., None], *args: object) -> None:
    threading.Thread(target=target, args=args, daemon=True).start()


class SlowBodyRelay:
    """A TCP relay to Swift's proxy that forwards each request's headers at once and its body
    ``body_delay_s`` later, as a congested network or a loaded machine would. Keeps what the
    proxy answered, to show which writes it accepted."""

    def __init__(self, upstream_port: int, body_delay_s: float) -> None:
        self._upstream_port = upstream_port
        self._body_delay_s = body_delay_s
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.answered = bytearray()
        _spawn(self._accept)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(("127.0.0.1", self._upstream_port), 10)
            _spawn(self._requests, client, upstream)
            _spawn(self._answers, upstream, client)

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        pending = b""
        with client, upstream:
            while True:
                while b"\r\n\r\n" not in pending:
                    chunk = client.recv(65536)
                    if not chunk:
                        return
                    pending += chunk
                head, pending = pending.split(b"\r\n\r\n", 1)
                upstream.sendall(head + b"\r\n\r\n")
                length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                size = int(length.group(1)) if length else 0
                while len(pending) < size:
                    chunk = client.recv(65536)
                    if not chunk:
                        return
                    pending += chunk
                if size:
                    time.sleep(self._body_delay_s)
                    upstream.sendall(pending[:size])
                pending = pending[size:]

    def _answers(self, upstream: socket.socket, client: socket.socket) -> None:
        while True:
            try:
                chunk = upstream.recv(65536)
            except OSError:
                return
            if not chunk:
                client.close()
                return
            self.answered += chunk
            client.sendall(chunk)

    def statuses(self) -> list[int]:
        """The status of every answer the proxy sent through this relay."""
        return [int(code) for code in re.findall(rb"HTTP/1\.[01] (\d{3}) ", self.answered)]

    def close(self) -> None:
        self._listener.close()


class RelayedClient(SwiftClient):
    """A client whose connections reach the account through a relay, with a token taken
    beforehand (tempauth names the proxy itself as the storage URL)."""

    def __init__(self, access: SwiftAccess, storage_url: str, token: str) -> None:
        super().__init__(access)
        self._storage_url, self._token = storage_url, token

    def _new_connection(self) -> swiftclient.Connection:
        return swiftclient.Connection(
            preauthurl=self._storage_url, preauthtoken=self._token, retries=0, timeout=10
        )


@pytest.fixture
def relayed_clients(
    swift_aio: SwiftAllInOne,
) -> Iterator[tuple[list[SwiftClient], list[SlowBodyRelay], str]]:
    """Two clients of the all-in-one, each through a relay holding bodies back, the first
    for FIRST_BODY_DELAY_S and the second for SECOND_BODY_DELAY_S; and a new container."""
    direct = SwiftClient(access_from_uri(swift_aio.store_uri))
    connection = direct._connection()
    connection.head_account()
    proxy = urllib.parse.urlsplit(connection.url)
    relays = [
        SlowBodyRelay(proxy.port or 80, delay)
        for delay in (FIRST_BODY_DELAY_S, SECOND_BODY_DELAY_S)
    ]
    clients = [
        RelayedClient(
            dataclasses.replace(direct.access, settle_ms=SETTLE_MS),
            f"http://127.0.0.1:{relay.port}{proxy.path}",
            connection.token,
        )
        for relay in relays
    ]
    container = f"settle-{uuid.uuid4().hex}"
    direct.put_container(container)
    try:
        yield clients, relays, container
    finally:
        for client in (*clients, direct):
            client.close()
        for relay in relays:
            relay.close()


def test_of_two_creations_committed_slower_than_settle_ms_one_is_kept(
    relayed_clients: tuple[list[SwiftClient], list[SlowBodyRelay], str],
) -> None:
    clients, relays, container = relayed_clients
    name = f"o-{uuid.uuid4().hex}"
    kept: dict[int, bool] = {}

    def create(which: int) -> None:
        kept[which] = clients[which].create_settled(
            container, name, f"body of writer {which}".encode(), "application/json"
        )

    first = threading.Thread(target=create, args=(0,))
    second = threading.Thread(target=create, args=(1,))
    first.start()
    time.sleep(SECOND_START_S)
    second.start()
    first.join()
    second.join()

    # The fault: both writes passed the create-only check and were stored (201 each, then
    # the settled read, 200), the second committed after the first one's commit plus
    # settle_ms.
    assert [relay.statuses() for relay in relays] == [[201, 200], [201, 200]]
    assert sorted(kept.values()) == [False, True], kept
    winner = next(which for which, won in kept.items() if won)
    found = clients[0].get(container, name, newest=True)
    assert found is not None and found[1] == f"body of writer {winner}".encode()
