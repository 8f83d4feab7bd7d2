"""Where WebSocket sessions open: in front of the HTTP API, on its own port.

A request that asks for a session (``handshake.wants_session``) is switched to the
WebSocket protocol here and served to its end on the connection's greenlet; every other
request passes to the HTTP API. Switching takes the connection from the WSGI server, which
gevent's server allows (after a ``101`` answer, ``wsgi.input`` reads the raw connection and
the write callable sends raw bytes); under other servers a session request is answered 501.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any

from zaqar_delay.api.auth import WSGIApp
from zaqar_delay.api.raw_errors import json_error
from zaqar_delay.api.websocket.frames import Frames
from zaqar_delay.api.websocket.handshake import accept_headers, wants_session
from zaqar_delay.api.websocket.project_sessions import ProjectSessions
from zaqar_delay.api.websocket.relay import SessionRelay
from zaqar_delay.api.websocket.session import Session
from zaqar_delay.clock import Clock, SystemClock

#: The environ entry of gunicorn's gevent worker that holds the connection's socket.
SOCKET_ENTRY = "gunicorn.sock"
#: A frame's room beyond the largest post it may carry: its action, headers and names.
FRAME_OVERHEAD = 64 * 1024


@dataclasses.dataclass(frozen=True)
class SessionRules:
    """How this process serves sessions: whether they authenticate (``keystone``), a
    message's largest size, how many sessions at once, the idle interval (seconds), the
    relay sessions subscribe themselves through (None: they cannot), the sessions each
    project holds, the port clients reach sessions at (``external_port``), and the clock
    pre-signed URLs are checked against."""

    keystone: bool
    max_message: int
    max_sessions: int
    ping_interval: float
    relay: SessionRelay | None = None
    projects: ProjectSessions | None = None
    external_port: int = 0  # the port a session request's Host must name (0: any)
    clock: Clock = dataclasses.field(default_factory=SystemClock)  # pre-signed URLs' clock


class WebSocketRoute:
    """``http`` (the WSGI app every other request goes to), with WebSocket sessions whose
    frames are answered by ``api`` (the HTTP API behind its authentication), by ``rules``."""

    def __init__(self, http: WSGIApp, api: WSGIApp, rules: SessionRules) -> None:
        self._http = http
        self._api = api
        self._rules = rules
        self._sessions = 0
        self._count = threading.Lock()

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        if not wants_session(environ):
            return self._http(environ, start_response)
        raw = environ.get(SOCKET_ENTRY)
        if raw is None:
            return _refuse(
                start_response,
                "501 Not Implemented",
                "This WSGI server cannot switch protocols: WebSocket sessions are served by "
                "zaqar-delay-server (gunicorn with its gevent worker).",
            )
        headers = accept_headers(environ, self._rules.external_port)
        if isinstance(headers, str):
            return _refuse(start_response, "400 Bad Request", headers)
        with self._count:
            full = self._sessions >= self._rules.max_sessions
            self._sessions += 0 if full else 1
        if full:
            return _refuse(
                start_response,
                "503 Service Unavailable",
                f"This server process holds its {self._rules.max_sessions} WebSocket sessions "
                "([drivers:transport:websocket] max_sessions): try again later.",
            )
        try:
            self._serve(environ, start_response, headers, raw)
        finally:
            with self._count:
                self._sessions -= 1
        return []

    def _serve(
        self,
        environ: dict[str, Any],
        start_response: Callable[..., Any],
        headers: list[tuple[str, str]],
        raw: Any,
    ) -> None:
        write = start_response("101 Switching Protocols", headers)
        write(b"")  # the answer's head goes out now; the session's bytes follow it
        rules = self._rules
        frames = Frames(
            self._api, environ, rules.keystone, rules.relay, rules.projects, rules.clock
        )

        def end() -> None:
            # Nothing follows a session on its connection: the server reads no next request
            # (and a read the session waits in returns).
            with contextlib.suppress(OSError):
                raw.shutdown(socket.SHUT_RDWR)

        try:
            Session(
                frames,
                environ["wsgi.input"],
                write,
                self._rules.max_message,
                self._rules.ping_interval,
                end,
            ).run()
        finally:
            end()


def with_websocket(http: WSGIApp, api: WSGIApp, rules: SessionRules) -> WSGIApp:
    """``http`` with WebSocket sessions in front of it (:class:`WebSocketRoute`), as a plain
    function, whose signature servers and test clients can inspect."""
    route = WebSocketRoute(http, api, rules)

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        return route(environ, start_response)

    return application


def _refuse(start_response: Callable[..., Any], status: str, description: str) -> list[bytes]:
    headers = [("Sec-WebSocket-Version", "13")]
    if status.startswith("503"):
        headers.append(("Retry-After", "1"))
    return json_error(start_response, status, "WebSocket session refused", description, headers)
