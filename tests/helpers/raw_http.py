"""HTTP spoken by hand over a socket, for requests no client library would send."""

from __future__ import annotations

import socket


def received_until_closed(connection: socket.socket) -> bytes:
    """What the server sends before it closes the connection (a timeout here fails)."""
    received = b""
    while chunk := connection.recv(65536):
        received += chunk
    return received
