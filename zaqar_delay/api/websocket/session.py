"""One WebSocket session: frames read from the connection, answered in order.

wsproto keeps the protocol (framing, masking, fragments, ping and close); this module reads
the socket, hands each whole message to ``Frames`` and writes the answer back, as JSON text
for a text message and MessagePack for a binary one, as Zaqar does. A message that is not a
JSON (or MessagePack) object is answered with a 400 frame; one larger than the session's
limit is answered with a 400 frame and the session closes (1009, message too big).

A watchdog beside the reader pings a session the peer sent nothing on for an idle interval,
and closes it (1001) when the next interval passes without a byte, so a client that vanished
without a close does not hold a session for ever. It closes a keystone session when the
token it authenticated with expires (4003, "Authentication expired.", as Zaqar does), and no
push reaches the session after that time: what a token allowed ends with it, pushes of the
session's own subscriptions included; it checks the token again every ``TOKEN_RECHECK_S``
and closes the session (4003, "Authentication refused.") once keystone refuses it (a revoked
token), as HTTP requests with it are then refused. It deletes a subscription the session
made through a pre-signed URL when the URL expires. Closing ends the connection
(``end``), which ends the read the session waits in. When the server process stops, every
live session is closed (1001, going away) and ends once the peer answers, or after
``CLOSING_S``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import msgpack
from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import (
    BytesMessage,
    CloseConnection,
    Event,
    Message,
    Ping,
    Pong,
    TextMessage,
)
from wsproto.frame_protocol import CloseReason

from zaqar_delay import jsondoc, stopping
from zaqar_delay.api.websocket.frames import Frames, error

LOG = logging.getLogger(__name__)
# Not msgpack's 256 KiB first buffer, a mapping of its own per frame once the server fixes
# glibc's mapping threshold (cmd/allocator.py), as the Redis driver's posts do: most frames
# are a few KiB, and the buffer grows as needed.
PACK_BUFFER_BYTES = 4096
READ_BYTES = 65536
#: How long a session this side closed waits for the peer's close before it ends.
CLOSING_S = 5.0
#: Zaqar's close code for a session whose token expired, and its reason; the same code closes
#: one whose token keystone came to refuse.
AUTH_EXPIRED = 4003
AUTH_EXPIRED_REASON = "Authentication expired."
AUTH_REFUSED_REASON = "Authentication refused."
#: How often a keystone session's token is checked again (seconds), so that a token keystone
#: revokes ends the session as it ends HTTP requests, however few frames the client sends.
TOKEN_RECHECK_S = 60.0


class Reader(Protocol):
    def read1(self, size: int = ..., /) -> bytes: ...


class Session:
    """Answers the frames of one connection (``reader`` the bytes that came after the
    upgrade request, ``write`` sends bytes) until either side closes it or ``end`` is
    called (which must make the reader's read return). ``ping_interval``: the idle interval
    (the module's docstring)."""

    def __init__(
        self,
        frames: Frames,
        reader: Reader,
        write: Callable[[bytes], Any],
        max_message: int,
        ping_interval: float,
        end: Callable[[], None],
        token_recheck_s: float = TOKEN_RECHECK_S,
    ) -> None:
        self._frames = frames
        self._reader = reader
        self._write = write
        self._max_message = max_message
        self._interval = ping_interval
        self._end = end
        self._connection = Connection(ConnectionType.SERVER)
        # The connection is the reader's and the watchdog's: one at a time.
        self._lock = threading.RLock()
        self._over = threading.Event()
        self._heard = time.monotonic()
        self._pinged = False  # a ping went out and nothing came since
        self._closing_since: float | None = None
        self._parts: list[str | bytes] = []
        self._size = 0
        self._notify_binary = False
        self._token_recheck_s = token_recheck_s
        self._next_token_check = time.monotonic() + token_recheck_s
        frames.own.deliver = self.notify

    def run(self) -> None:
        """Serve until the peer closes, the connection breaks, a message is too large or
        the session is idle; then what the session subscribed of itself goes."""
        watchdog = threading.Thread(target=self._watch, name="websocket-watchdog", daemon=True)
        watchdog.start()
        stopping.track(self, Session.go_away)
        try:
            self._serve()
        finally:
            stopping.forget(self)
            self._over.set()
            self._frames.end()

    def go_away(self) -> None:
        """Close the session (1001): the server stops. The watchdog ends it if the peer does
        not answer within ``CLOSING_S``."""
        with self._lock:
            if self._connection.state is not ConnectionState.OPEN:
                return
            try:
                self._close(CloseReason.GOING_AWAY, "the server stops")
            except OSError:
                self._end()

    def notify(self, body: bytes) -> bool:
        """Send a push's body (JSON) as a notification frame: MessagePack when the session
        last subscribed itself with a binary frame, else text, as Zaqar's; False when the
        session can take no more."""
        with self._lock:
            if self._connection.state is not ConnectionState.OPEN:
                return False
            try:
                if self._frames.expired(time.time()):
                    self._close(AUTH_EXPIRED, AUTH_EXPIRED_REASON)
                    return False
                if self._notify_binary:
                    self._send(BytesMessage(_packed(json.loads(body))))
                else:
                    self._send(TextMessage(body.decode("utf-8", "replace")))
            except OSError:
                return False
            return True

    def _serve(self) -> None:
        while self._connection.state in (ConnectionState.OPEN, ConnectionState.LOCAL_CLOSING):
            try:
                data = self._reader.read1(READ_BYTES)
            except OSError:
                return
            with self._lock:
                self._heard, self._pinged = time.monotonic(), False
                self._connection.receive_data(data or None)
                try:
                    for event in self._connection.events():
                        self._handle(event)
                except OSError:  # an answer could not be sent: the peer is gone or stalled
                    return
            if not data:
                return

    def _watch(self) -> None:
        """Ping an idle session, close one still silent, end one whose close went
        unanswered."""
        while not self._over.wait(self._next_look()):
            refused = self._token_refused_now()
            with self._lock:
                if refused and self._connection.state is ConnectionState.OPEN:
                    with contextlib.suppress(OSError):
                        self._close(AUTH_EXPIRED, AUTH_REFUSED_REASON)
                if self._due_to_end():
                    self._end()
                    return

    def _token_refused_now(self) -> bool:
        """Whether keystone refuses the session's token, checked once ``token_recheck_s`` has
        passed since the last check (outside the session's lock: it may wait for keystone)."""
        if self._frames.token is None or time.monotonic() < self._next_token_check:
            return False
        self._next_token_check = time.monotonic() + self._token_recheck_s
        try:
            return self._frames.token_refused()
        except Exception:  # the watchdog goes on; the next check may answer
            LOG.exception("A WebSocket session's token could not be checked")
            return False

    def _next_look(self) -> float:
        """Seconds until the watchdog looks again: half the shorter of the idle interval and
        the closing time, or less when something it watches for comes sooner (the token's
        expiry or next check, a pre-signed URL's expiry). One already past is not waited
        for again: the look that found it acted on it."""
        wait = min(self._interval, CLOSING_S) / 2
        expires_at = self._frames.expires_at
        for left in (
            None if expires_at is None else expires_at - time.time(),
            self._frames.own.seconds_to_lapse(),
            None if self._frames.token is None else self._next_token_check - time.monotonic(),
        ):
            if left is not None and left > 0:
                wait = min(wait, left)
        return wait

    def _due_to_end(self) -> bool:
        now = time.monotonic()
        if self._closing_since is not None:
            return now - self._closing_since >= CLOSING_S
        if self._connection.state is not ConnectionState.OPEN:
            return False
        self._frames.own.lapse()
        try:
            if self._frames.expired(time.time()):
                self._close(AUTH_EXPIRED, AUTH_EXPIRED_REASON)
                return False
        except OSError:
            return True
        if now - self._heard < self._interval:
            return False
        try:
            if self._pinged:
                self._close(CloseReason.GOING_AWAY, "idle")
                return True
            self._send(Ping(b"idle?"))
        except OSError:
            return True
        self._pinged, self._heard = True, now
        return False

    def _close(self, reason: CloseReason | int, why: str) -> None:
        self._send(CloseConnection(reason, why))
        self._closing_since = time.monotonic()

    def _handle(self, event: Event) -> None:
        if self._connection.state is ConnectionState.LOCAL_CLOSING:
            return  # the rest of a message too large, or anything before the peer's close
        if isinstance(event, Message):
            self._received(event)
        elif isinstance(event, Pong):
            pass  # its bytes already told the peer is there
        elif isinstance(event, Ping | CloseConnection):
            # A pong, or the close answered (the peer's close leaves the state closing).
            self._send(event.response())

    def _received(self, message: Message[Any]) -> None:
        self._size += len(message.data)
        if self._size > self._max_message:
            binary = isinstance(message, BytesMessage)
            self._answer(error({}, 400, f"A frame is at most {self._max_message} bytes."), binary)
            self._close(CloseReason.MESSAGE_TOO_BIG, "frame too large")
            return
        self._parts.append(message.data)
        if not message.message_finished:
            return
        parts, self._parts, self._size = self._parts, [], 0
        binary = not isinstance(message, TextMessage)
        payload = (
            b"".join(p for p in parts if isinstance(p, bytes))
            if binary
            else "".join(p for p in parts if isinstance(p, str))
        )
        answer = self._frames_answer(payload, binary)
        if _subscribed_itself(answer):
            # As Zaqar: notifications take the form of the last self-subscription's frame.
            self._notify_binary = binary
        self._answer(answer, binary)

    def _frames_answer(self, payload: str | bytes, binary: bool) -> dict[str, Any]:
        try:
            frame = msgpack.unpackb(payload) if binary else json.loads(payload)
        except (ValueError, TypeError, RecursionError, msgpack.UnpackException) as exc:
            kind = "binary (MessagePack)" if binary else "text (JSON)"
            return error({}, 400, f"Can't decode {kind} request. {type(exc).__name__}: {exc}")
        if jsondoc.nests_deeper(frame, jsondoc.MAX_DEPTH):
            # As a request body over HTTP: answering echoes the frame, and its route reads the
            # body as JSON, each recursing once per level from deep in a session's stack.
            return error({}, 400, f"A frame nests at most {jsondoc.MAX_DEPTH} levels deep.")
        try:
            return self._frames.answer(frame)
        except Exception:  # a failing frame is answered, logged, and the session lives on
            LOG.exception("WebSocket frame failed")
            return error({}, 500, "The frame could not be answered.")

    def _answer(self, frame: dict[str, Any], binary: bool) -> None:
        if binary:
            self._send(BytesMessage(_packed(frame)))
        else:
            self._send(TextMessage(jsondoc.dumps(frame)))

    def _send(self, event: Event) -> None:
        if self._connection.state in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            self._write(self._connection.send(event))


def _subscribed_itself(answer: dict[str, Any]) -> bool:
    """Whether ``answer`` is a ``subscription_create`` without a subscriber that succeeded."""
    request = answer.get("request")
    if not isinstance(request, dict) or request.get("action") != "subscription_create":
        return False
    body = request.get("body")
    named = isinstance(body, dict) and bool(body.get("subscriber"))
    return not named and answer.get("headers", {}).get("status") == 201


def _packed(frame: Any) -> bytes:
    """``frame`` as a MessagePack binary frame's payload."""
    packed: bytes = msgpack.packb(frame, buf_size=PACK_BUFFER_BYTES)
    return packed
