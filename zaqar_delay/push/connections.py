"""Keep-alive HTTP(S) connections to subscribers, one POST at a time, on the standard library.

``http.client`` directly: under the server's gevent workers a POST to a loopback receiver
through urllib3 costs about 620 µs of CPU, and 250 µs here, and the dispatcher sends up to
thousands per second. What urllib3 would add is not wanted anyway: no
proxies or ``.netrc`` from the environment (the guard must see the receiver's own address), no
redirects, no retries of its own.

Every new connection is opened by the guard (``AddressGuard.connect``), through the public
``connect`` step of ``http.client``'s connections: the receiver's name is resolved once and
only addresses the guard permits are connected to; over TLS the certificate is then verified
against the system's trust store. A request may take
``timeout_s`` in all: each step may take what is left, and a reaper shuts the connection of a
request still running at its deadline (a receiver that trickles its answer a byte at a time
would otherwise hold the request open for ever).

An idle connection the receiver has closed in the meantime shows as a connection error with
no answer read; such a request is sent once more on a new connection (the receiver may see it
twice, as with any at-least-once delivery).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import http.client
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from zaqar_delay.push.guard import AddressGuard

# Bytes of a response body read at most; a connection with more left is closed, not reused.
MAX_RESPONSE_BODY = 65_536
# How often the reaper looks for requests past their deadline, and for idle connections to
# close.
REAP_EVERY_S = 0.1
# Idle connections kept for reuse over every receiver: past this many, the one idle longest is
# closed. Subscriptions may name any number of receivers (ports, host names), and each kept
# connection holds a file descriptor of the server process.
IDLE_KEPT = 256
# An idle connection is closed after this many seconds (receivers close theirs after 5 to 75).
IDLE_S = 30.0
Origin = tuple[str, str, int]  # scheme, host, port


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    """A receiver's answer: its status and its ``Retry-After`` header (None: none)."""

    status: int
    retry_after: str | None


@functools.lru_cache(maxsize=4096)
def _split(url: str) -> tuple[Origin, str]:
    """The origin and the request target of ``url`` (ValueError if it is not http(s))."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("the subscriber is not an http(s) URL with a host")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return (parts.scheme, parts.hostname, port), target


# Opens a TCP connection as socket.create_connection does: (host, port), timeout, source.
OpenSocket = Callable[[tuple[str, int], float | None, tuple[str, int] | None], socket.socket]


class GuardedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection whose socket ``open_socket`` (the guard's ``connect``) opens: the
    public ``connect`` step is the one replaced, so no request leaves before the receiver's
    addresses passed the guard."""

    def __init__(self, host: str, port: int, timeout_s: float, open_socket: OpenSocket) -> None:
        super().__init__(host, port, timeout=timeout_s)
        self.open_socket = open_socket

    def connect(self) -> None:
        self.sock = _opened(self.open_socket, self.host, self.port, self.timeout)


class GuardedHTTPSConnection(http.client.HTTPSConnection):
    """:class:`GuardedHTTPConnection` over TLS, verified by ``tls``."""

    def __init__(
        self,
        host: str,
        port: int,
        timeout_s: float,
        open_socket: OpenSocket,
        tls: ssl.SSLContext,
    ) -> None:
        super().__init__(host, port, timeout=timeout_s, context=tls)
        self.open_socket = open_socket
        self.tls = tls

    def connect(self) -> None:
        sock = _opened(self.open_socket, self.host, self.port, self.timeout)
        self.sock = self.tls.wrap_socket(sock, server_hostname=self.host)


def _opened(open_socket: OpenSocket, host: str, port: int, timeout: Any) -> socket.socket:
    """A connected socket that sends small requests at once (as ``HTTPConnection.connect``
    sets it up; no proxy tunnel: pushes go to the receiver itself)."""
    sock = open_socket((host, port), timeout, None)
    with contextlib.suppress(OSError):  # not every transport has Nagle's algorithm
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class ConnectionPool:
    """POSTs to any http(s) URL over reused connections; thread- and greenlet-safe."""

    def __init__(
        self,
        guard: AddressGuard,
        timeout_s: float,
        idle_per_origin: int,
        idle_kept: int = IDLE_KEPT,
        idle_s: float = IDLE_S,
    ) -> None:
        """Each request may take ``timeout_s`` in all; ``idle_per_origin`` connections to
        one receiver (scheme, host, port) are kept for reuse, ``idle_kept`` over all of them,
        each for ``idle_s`` at most."""
        self.timeout_s = timeout_s
        self.idle_per_origin = idle_per_origin
        self.idle_kept = idle_kept
        self.idle_s = idle_s
        self._connect = guard.connect
        self._tls = ssl.create_default_context()
        self._idle: dict[Origin, list[http.client.HTTPConnection]] = {}
        # Every idle connection, longest idle first: its origin and since when it idles.
        self._idle_since: collections.OrderedDict[
            http.client.HTTPConnection, tuple[Origin, float]
        ] = collections.OrderedDict()
        self._lock = threading.Lock()
        # Requests running: connection -> deadline (time.monotonic()).
        self._running: dict[http.client.HTTPConnection, float] = {}
        self._closed = threading.Event()
        self._reaper: threading.Thread | None = None

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> Answer:
        """POST once (once more on a new connection if a reused one turns out closed).

        Raises ``DeniedAddress``, ``TimeoutError`` (the whole request took over the timeout),
        ``OSError`` or ``http.client.HTTPException`` (connection failed or answer malformed),
        ``ValueError`` (not an http(s) URL).
        """
        origin, target = _split(url)
        deadline = time.monotonic() + self.timeout_s
        self._start_reaper()
        connection, reused = self._take(origin)
        try:
            return self._exchange(connection, origin, target, body, headers, deadline)
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            connection.close()
            if not reused:
                raise
        connection = self._open(origin)
        try:
            return self._exchange(connection, origin, target, body, headers, deadline)
        except BaseException:
            connection.close()
            raise

    def _exchange(
        self,
        connection: http.client.HTTPConnection,
        origin: Origin,
        target: str,
        body: bytes,
        headers: dict[str, str],
        deadline: float,
    ) -> Answer:
        self._running[connection] = deadline
        try:
            _set_timeout(connection, deadline)
            connection.request("POST", target, body, headers)
            _set_timeout(connection, deadline)
            response = connection.getresponse()
            response.read(MAX_RESPONSE_BODY)
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            if isinstance(exc, TimeoutError) or time.monotonic() >= deadline:
                raise TimeoutError(f"no answer within {self.timeout_s:g} s") from exc
            raise
        finally:
            self._running.pop(connection, None)
        answer = Answer(response.status, response.getheader("Retry-After"))
        if response.isclosed() and not response.will_close:
            self._give_back(origin, connection)
        else:
            connection.close()
        return answer

    def _take(self, origin: Origin) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            idle = self._idle.get(origin)
            if idle:
                connection = idle.pop()
                if not idle:
                    del self._idle[origin]
                del self._idle_since[connection]
                return connection, True
        return self._open(origin), False

    def _open(self, origin: Origin) -> http.client.HTTPConnection:
        """A connection to ``origin``, opened at its first request, through the guard."""
        scheme, host, port = origin
        if scheme == "https":
            return GuardedHTTPSConnection(host, port, self.timeout_s, self._connect, self._tls)
        return GuardedHTTPConnection(host, port, self.timeout_s, self._connect)

    def _give_back(self, origin: Origin, connection: http.client.HTTPConnection) -> None:
        now = time.monotonic()
        with self._lock:
            kept = len(self._idle.get(origin, ())) < self.idle_per_origin
            if kept:
                self._idle.setdefault(origin, []).append(connection)
                self._idle_since[connection] = (origin, now)
            dropped = self._drop_idle(now)
        for surplus in dropped if kept else [connection, *dropped]:
            surplus.close()

    def _drop_idle(self, now: float) -> list[http.client.HTTPConnection]:
        """Under the lock: take out the connections idle longer than ``idle_s``, and the
        longest idle ones past ``idle_kept``, for the caller to close."""
        dropped = []
        while self._idle_since:
            connection, (origin, since) = next(iter(self._idle_since.items()))
            if len(self._idle_since) <= self.idle_kept and now - since < self.idle_s:
                break
            del self._idle_since[connection]
            idle = self._idle[origin]
            idle.remove(connection)
            if not idle:
                del self._idle[origin]
            dropped.append(connection)
        return dropped

    def _start_reaper(self) -> None:
        if self._reaper is None:
            with self._lock:
                if self._reaper is None:
                    self._reaper = threading.Thread(
                        target=self._reap, name="zaqar-delay-push-reaper", daemon=True
                    )
                    self._reaper.start()

    def _reap(self) -> None:
        """Shut the connections of requests past their deadline: the request fails at once
        (as a timeout), whatever step it is blocked in. Close those idle past ``idle_s``."""
        while not self._closed.wait(REAP_EVERY_S):
            now = time.monotonic()
            for connection, deadline in list(self._running.items()):
                if deadline <= now and connection.sock is not None:
                    with contextlib.suppress(OSError):  # already closed
                        connection.sock.shutdown(socket.SHUT_RDWR)
            with self._lock:
                dropped = self._drop_idle(now)
            for connection in dropped:
                connection.close()

    def idle_connections(self) -> int:
        """How many connections are kept idle for reuse."""
        return len(self._idle_since)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            idle, self._idle = self._idle, {}
            self._idle_since.clear()
        for connections in idle.values():
            for connection in connections:
                connection.close()


def _set_timeout(connection: http.client.HTTPConnection, deadline: float) -> None:
    """Each blocking step may take what is left of the request's time, no more."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("request deadline passed")
    connection.timeout = left
    if connection.sock is not None:
        connection.sock.settimeout(left)
