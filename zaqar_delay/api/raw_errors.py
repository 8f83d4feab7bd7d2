"""Errors answered below falcon, by plain WSGI code in front of the API (authentication, the
WebSocket upgrade, the dashboard), in the form falcon's handlers give them: a JSON object with
a ``title`` and a ``description``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from zaqar_delay import jsondoc


def json_error(
    start_response: Callable[..., Any],
    status: str,
    title: str,
    description: str,
    headers: Iterable[tuple[str, str]] = (),
) -> list[bytes]:
    """Start a ``status`` response whose body is the JSON error, with ``headers`` besides its
    own, and return that body."""
    body = jsondoc.dumps({"title": title, "description": description}).encode()
    start_response(
        status,
        [("Content-Type", "application/json"), ("Content-Length", str(len(body))), *headers],
    )
    return [body]
