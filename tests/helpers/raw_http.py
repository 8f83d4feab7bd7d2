"""HTTP spoken by hand over a socket, for requests no client library would send."""

from __future__ import annotations

import json
import socket
from typing import Any

import requests


def received_until_closed(connection: socket.socket) -> bytes:
    """What the server sends before it closes the connection (a timeout here fails)."""
    received = b""
    while chunk := connection.recv(65536):
        received += chunk
    return received


def refusal_of(connection: socket.socket) -> tuple[bytes, dict[str, Any]]:
    """The status line and JSON body of the answer the server sends before it closes the
    connection, which must be a JSON error (``title`` and ``description``)."""
    head, _, body = received_until_closed(connection).partition(b"\r\n\r\n")
    status_line, *fields = head.split(b"\r\n")
    lowered = [field.lower() for field in fields]
    assert b"content-type: application/json" in lowered, head
    assert f"content-length: {len(body)}".encode() in lowered, head
    document: dict[str, Any] = json.loads(body)
    assert set(document) == {"title", "description"} and all(document.values()), document
    return status_line, document


def post_large_messages(
    url: str, queue: str, headers: dict[str, str], count: int, pad: int
) -> None:
    """Post ``count`` messages of about ``pad`` bytes each to ``queue`` of the server at
    ``url``, one per request, for listings larger than the sockets on both sides buffer."""
    for n in range(count):
        message = {"ttl": 300, "body": {"n": n, "pad": "x" * pad}}
        posted = requests.post(
            f"{url}/v2/queues/{queue}/messages",
            json={"messages": [message]},
            headers=headers,
            timeout=10,
        )
        assert posted.status_code == 201, posted.text


def server_has_read(server_port: int, client: socket.socket) -> bool:
    """Whether the server listening on loopback ``server_port`` has read everything
    ``client`` (connected to it) sent: its end of the connection holds no unread byte
    (``/proc/net/tcp``'s receive queue), so the request is past the server's reads."""
    client_port = client.getsockname()[1]
    wanted = (f"0100007F:{server_port:04X}", f"0100007F:{client_port:04X}")
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if (fields[1], fields[2]) == wanted:
                return int(fields[4].split(":")[1], 16) == 0
    raise AssertionError(f"no connection from port {client_port} to port {server_port}")
