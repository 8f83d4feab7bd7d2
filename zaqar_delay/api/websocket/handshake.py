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


def accept_headers(
    environ: Mapping[str, Any], external_port: int = 0
) -> list[tuple[str, str]] | str:
    """The ``101 Switching Protocols`` answer's headers, or why the request cannot open a
    session (an answer for a 400). With ``external_port``, the Host header must name that
    port (its scheme's default when it names none), as Zaqar's server checks it."""
    if environ.get("REQUEST_METHOD") != "GET":
        return "A WebSocket session opens with GET."
    if external_port:
        named = host_port(environ)
        if named != external_port:
            return (
                f"The Host header names port {named}; sessions are served at port "
                f"{external_port} ([drivers:transport:websocket] external_port)."
            )
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


def host_port(environ: Mapping[str, Any]) -> int | None:
    """The port the request's Host header names (its scheme's default when it names none);
    None when the header is missing or its port is not a number."""
    host = str(environ.get("HTTP_HOST", ""))
    if not host:
        return None
    after_address = host.rsplit("]", 1)[-1]  # an IPv6 literal holds colons of its own
    if ":" not in after_address:
        return 443 if environ.get("wsgi.url_scheme") == "https" else 80
    port = after_address.rsplit(":", 1)[1]
    return int(port) if port.isdigit() else None
