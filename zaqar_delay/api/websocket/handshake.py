"""The HTTP/1.1 upgrade that opens a WebSocket session (RFC 6455, section 4.2.1)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from wsproto.utilities import generate_accept_token

#: Where a session opens: the API's root and its v2 root, as Zaqar's clients connect.
SESSION_PATHS = frozenset({"/", "/v2", "/v2/"})
VERSION = "13"


def wants_session(environ: Mapping[str, Any]) -> bool:
    """Whether the request asks for a WebSocket session (``Upgrade: websocket`` to one of
    ``SESSION_PATHS``); every other request is the HTTP API's."""
    upgrade = str(environ.get("HTTP_UPGRADE", "")).lower()
    return upgrade == "websocket" and environ.get("PATH_INFO") in SESSION_PATHS


def accept_headers(environ: Mapping[str, Any]) -> list[tuple[str, str]] | str:
    """The ``101 Switching Protocols`` answer's headers, or why the request cannot open a
    session (an answer for a 400)."""
    if environ.get("REQUEST_METHOD") != "GET":
        return "A WebSocket session opens with GET."
    tokens = {t.strip().lower() for t in str(environ.get("HTTP_CONNECTION", "")).split(",")}
    if "upgrade" not in tokens:
        return "A WebSocket session needs Connection: Upgrade."
    if environ.get("HTTP_SEC_WEBSOCKET_VERSION") != VERSION:
        return f"Sec-WebSocket-Version {VERSION} is the version served."
    key = str(environ.get("HTTP_SEC_WEBSOCKET_KEY", ""))
    try:
        nonce = base64.b64decode(key, validate=True)
    except (binascii.Error, ValueError):
        nonce = b""
    if len(nonce) != 16:
        return "Sec-WebSocket-Key must be 16 bytes in base64."
    return [
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Accept", generate_accept_token(key.encode()).decode()),
    ]
