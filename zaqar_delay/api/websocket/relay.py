"""Where pushes to this process's self-subscribed sessions arrive.

A session that subscribes itself (``subscription_create`` without ``subscriber``) is
subscribed as ``zaqar-ws://HOST:PORT/<session id>`` (``push/sessions.py``): this process's
relay, an HTTP listener started with the first such session. Whichever server process's
dispatcher owes the push at the message's due time posts its body there, and the relay hands
it to the session as a notification frame (204), or answers 410 when the session is gone.
Session ids are 128 random bits: the relay is found by address, a session only by its id.
The subscriber, session id included, is shown to whoever may read the project's
subscriptions, so a push must also be signed with the session's own key, the signing secret
of each of its subscriptions (``push/webhook.py``'s signature): one signed otherwise answers
403, and an unsigned one 503 (a dispatcher of an earlier release; another sends it again).
The signature covers the push's sending time: a push signed more than ``REPLAY_WINDOW_MS``
from the relay's clock answers 403, and one the relay took already, seen again, 204 without
being handed over twice, so a push captured on its way cannot be replayed into the session.
"""

from __future__ import annotations

import dataclasses
import http.server
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from zaqar_delay.clock import Clock, SystemClock
from zaqar_delay.push.sessions import session_subscriber
from zaqar_delay.push.webhook import DELIVERY_ID_HEADER, SIGNATURE_HEADER, signed_at

LOG = logging.getLogger(__name__)

#: The environ entry by which a session's own subscription request names its subscriber, a
#: :class:`SessionSubscriber` (a request from outside the process cannot set environ entries,
#: only headers).
SESSION_SUBSCRIBER_ENV = "zaqar_delay.session_subscriber"

Deliver = Callable[[bytes], bool]


@dataclasses.dataclass(frozen=True)
class SessionSubscriber:
    """A session's own subscription request: the subscriber that reaches the session
    (``address``), and where the subscription route leaves, for each subscription it made,
    how to delete it with the server's own authority (``forgets``): when the session ends,
    its token may have expired, and a pre-signed URL may allow no delete."""

    address: str
    #: The session's key: the signing secret its subscriptions get, which the relay checks.
    secret: str
    #: How to delete each subscription the request made or found, by subscription id.
    forgets: dict[str, Callable[[], None]] = dataclasses.field(default_factory=dict)


#: How long the relay waits for a connection's next bytes before closing it: a dispatcher
#: sends its whole request at once, and a connection that sends nothing must not hold a
#: thread for ever.
IDLE_TIMEOUT_S = 10.0

#: How far a push's signing time may lie from the relay's clock, either way. Servers of one
#: deployment keep their clocks within milliseconds of each other (due times need it); this
#: bounds how long a captured push could be replayed, and how long the relay remembers the
#: pushes it took to know a replay within it.
REPLAY_WINDOW_MS = 60_000


class TakenPushes:
    """The signatures of the pushes a relay took, each kept two windows after it came: a
    replay within the window of its signing time comes within two windows of the first."""

    def __init__(self) -> None:
        self._came_ms: OrderedDict[str, int] = OrderedDict()  # signature -> when it came

    def first_time(self, signed: str, now_ms: int) -> bool:
        """Whether ``signed`` comes for the first time (remembering it if so)."""
        while self._came_ms:
            oldest, came_ms = next(iter(self._came_ms.items()))
            if came_ms > now_ms - 2 * REPLAY_WINDOW_MS:
                break
            del self._came_ms[oldest]
        if signed in self._came_ms:
            return False
        self._came_ms[signed] = now_ms
        return True

    def __len__(self) -> int:
        return len(self._came_ms)


class SessionRelay:
    """This process's self-subscribed sessions, by id, and the listener pushes reach them
    through, on ``host`` (an address the other servers' dispatchers reach; loopback for one
    machine). A push body over ``max_body`` bytes is refused (413), and a connection idle for
    ``IDLE_TIMEOUT_S`` is closed."""

    def __init__(self, host: str, max_body: int, clock: Clock | None = None) -> None:
        self._host = host
        self._max_body = max_body
        self._clock = clock or SystemClock()
        self._sessions: dict[str, tuple[Deliver, str]] = {}  # id -> (deliver, key)
        self._taken = TakenPushes()
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None

    def subscriber(self, session_id: str, deliver: Deliver, secret: str) -> str:
        """Register a session's ``deliver`` (False once it can take no more) and the key its
        pushes are signed with, and return the subscriber that reaches it; starts the
        listener the first time."""
        with self._lock:
            self._sessions[session_id] = (deliver, secret)
            if self._server is None:
                self._server = self._listen()
            port = self._server.server_address[1]
        return session_subscriber(self._host, port, session_id)

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def answer(self, session_id: str, body: bytes, signed: str | None, delivery_id: str) -> int:
        """Hand a push to its session: 204 when it took it (or took it before: a replay is
        not handed over again), 410 when there is no such session or it can take no more,
        403 when the push is signed with another key than the session's or at a time more
        than ``REPLAY_WINDOW_MS`` from now, 503 when it is not signed."""
        with self._lock:
            found = self._sessions.get(session_id)
        if found is None:
            return 410
        deliver, secret = found
        if signed is None:
            return 503
        sent_ms = signed_at(secret, signed, delivery_id, body)
        now_ms = self._clock.now_ms()
        if sent_ms is None or abs(now_ms - sent_ms) > REPLAY_WINDOW_MS:
            return 403
        with self._lock:
            first_time = self._taken.first_time(signed, now_ms)
        if not first_time:
            return 204
        return 204 if deliver(body) else 410

    def taken(self) -> int:
        """How many pushes the relay remembers having taken (within two windows)."""
        with self._lock:
            return len(self._taken)

    def close(self) -> None:
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def _listen(self) -> http.server.ThreadingHTTPServer:
        relay = self

        class Handler(http.server.BaseHTTPRequestHandler):
            timeout = IDLE_TIMEOUT_S

            def do_POST(self) -> None:
                try:
                    length = int(self.headers.get("Content-Length") or "")
                except ValueError:
                    length = -1
                if not 0 <= length <= relay._max_body:
                    self._answer(400 if length < 0 else 413)
                    return
                body = self.rfile.read(length)
                signed = self.headers.get(SIGNATURE_HEADER)
                delivery_id = self.headers.get(DELIVERY_ID_HEADER) or ""
                self._answer(relay.answer(self.path.lstrip("/"), body, signed, delivery_id))

            def _answer(self, status: int) -> None:
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer((self._host, 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="websocket-relay", daemon=True).start()
        LOG.info("WebSocket relay on %s:%s", self._host, server.server_address[1])
        return server
