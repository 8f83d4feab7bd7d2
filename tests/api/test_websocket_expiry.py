"""What a WebSocket session may do ends with the authority it was given: a keystone session is
closed when its token expires (4003, as Zaqar's), no push reaches it after that time, and the
subscriptions a session made of itself are deleted when it ends, whether its token has expired
or it subscribed through a pre-signed URL that allows no delete.

Sessions run in process here (``api/websocket/session.py`` over a socket pair, a wsproto
client on the other end); under gunicorn they run in ``tests/functional/test_websocket.py``.
"""

from __future__ import annotations

import datetime
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from wsproto.connection import Connection, ConnectionType
from wsproto.events import CloseConnection, Event, TextMessage

from tests.helpers.api import signed_headers
from tests.helpers.keystone import Keystone, keystone_app
from zaqar_delay.api.websocket.frames import Frames
from zaqar_delay.api.websocket.relay import SessionRelay
from zaqar_delay.api.websocket.session import AUTH_EXPIRED, CLOSING_S, Session
from zaqar_delay.clock import Clock, FakeClock
from zaqar_delay.service import Service
from zaqar_delay.storage.redis.embedded import EmbeddedRedis

CLIENT_ID = "3381af92-2b9e-11e3-b191-71861300734c"
SESSION = {"SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8888", "HTTP_HOST": "127.0.0.1:8888"}
SUBSCRIPTIONS = "/v2/queues/q/subscriptions"


@pytest.fixture
def served(tmp_path: Path, embedded_redis: EmbeddedRedis) -> Iterator[tuple[Keystone, Service]]:
    # No token cache: a token the fixture forgets is refused at once (revoked).
    conf = "[signed_url]\nsecret_key = k\n[keystone_authtoken]\ntoken_cache_time = -1\n"
    yield from keystone_app(tmp_path, embedded_redis, conf)


@pytest.fixture
def keystone(served: tuple[Keystone, Service]) -> Keystone:
    return served[0]


@pytest.fixture
def relay(served: tuple[Keystone, Service]) -> Iterator[SessionRelay]:
    # On the service's clock: the relay takes pushes signed within a window of its now.
    found = SessionRelay("127.0.0.1", max_body=1_000_000, clock=served[1].clock)
    yield found
    found.close()


class Client:
    """A session served in a thread of its own, and the client end of its connection."""

    def __init__(
        self,
        keystone: Keystone,
        relay: SessionRelay,
        clock: Clock | None = None,
        token_recheck_s: float = 60.0,
    ) -> None:
        self.frames = Frames(keystone.client.app, SESSION, keystone=True, relay=relay, clock=clock)
        served, self._socket = socket.socketpair()
        self._socket.settimeout(15)
        self._connection = Connection(ConnectionType.CLIENT)
        self.session = Session(
            self.frames,
            served.makefile("rb"),
            served.sendall,
            max_message=1_000_000,
            ping_interval=30.0,
            end=lambda: served.shutdown(socket.SHUT_RDWR),
            token_recheck_s=token_recheck_s,
        )
        self._thread = threading.Thread(target=self.session.run, daemon=True)
        self._thread.start()

    def call(self, action: str, headers: dict[str, str], **body: Any) -> dict[str, Any]:
        headers = {"Client-ID": CLIENT_ID, "X-Project-ID": "alpha", **headers}
        frame = {"action": action, "headers": headers, "body": body}
        self._socket.sendall(self._connection.send(TextMessage(json.dumps(frame))))
        [answer] = [e for e in self.events() if isinstance(e, TextMessage)]
        found: dict[str, Any] = json.loads(answer.data)
        return found

    def events(self) -> list[Event]:
        while True:
            self._connection.receive_data(self._socket.recv(65536))
            found = list(self._connection.events())
            if found:
                return found

    def closed(self) -> CloseConnection:
        """The session's close, answered; then the session ends."""
        while True:
            for event in self.events():
                if isinstance(event, CloseConnection):
                    self._socket.sendall(self._connection.send(event.response()))
                    self._thread.join(15)
                    assert not self._thread.is_alive()
                    return event

    def wait_for_end(self) -> None:
        self._thread.join(3 * CLOSING_S)
        assert not self._thread.is_alive()

    def close(self) -> None:
        self._socket.sendall(self._connection.send(CloseConnection(1000)))
        self._thread.join(15)
        assert not self._thread.is_alive()


def status(answer: dict[str, Any]) -> int:
    return int(answer["headers"]["status"])


def in_seconds(seconds: float) -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)


def subscribers(keystone: Keystone) -> list[str]:
    listed = keystone.call("GET", SUBSCRIPTIONS, token=keystone.token("alpha"))
    assert listed.status_code == 200, listed.text
    return [s["subscriber"] for s in listed.json["subscriptions"]]


def fake_clock(service: Service) -> FakeClock:
    assert isinstance(service.clock, FakeClock)
    return service.clock


def subscribing_url(keystone: Keystone, clock: FakeClock, expires_in_s: int) -> dict[str, Any]:
    """A pre-signed URL of project alpha's subscriptions of queue q, allowing POST only,
    expiring ``expires_in_s`` seconds from now on ``clock``."""
    expires_ms = clock.now_ms() + expires_in_s * 1000
    expires = datetime.datetime.fromtimestamp(expires_ms // 1000, datetime.UTC)
    shared = keystone.call(
        "POST",
        "/v2/queues/q/share",
        token=keystone.token("alpha"),
        json={
            "paths": ["subscriptions"],
            "methods": ["POST"],
            "expires": expires.strftime("%Y-%m-%dT%H:%M:%S"),
        },
    )
    assert shared.status_code == 200, shared.text
    document: dict[str, Any] = shared.json
    return document


def subscribed_through_url(
    keystone: Keystone, relay: SessionRelay, clock: FakeClock, expires_in_s: int
) -> tuple[dict[str, Any], Client, dict[str, Any]]:
    """A session that subscribed itself to queue q through a pre-signed URL expiring
    ``expires_in_s`` from now: the URL's document, the session, and the frame's answer."""
    shared = subscribing_url(keystone, clock, expires_in_s)
    client = Client(keystone, relay, clock)
    made = client.call("subscription_create", signed_headers(shared), queue_name="q")
    assert status(made) == 201, made
    return shared, client, made


def test_a_session_is_closed_when_its_token_expires_and_its_subscriptions_go(
    keystone: Keystone, relay: SessionRelay
) -> None:
    expires = in_seconds(3)
    token = keystone.token("alpha", expires=expires)
    client = Client(keystone, relay)
    assert status(client.call("authenticate", {"X-Auth-Token": token})) == 200
    assert status(client.call("subscription_create", {}, queue_name="q", ttl=600)) == 201
    [subscriber] = subscribers(keystone)
    assert subscriber.startswith("zaqar-ws://127.0.0.1:")
    close = client.closed()
    # The token has expired: keystone refuses it now.
    assert keystone.call("GET", "/v2/queues", token=token).status_code == 401
    assert (close.code, close.reason) == (AUTH_EXPIRED, "Authentication expired.")
    assert time.time() >= expires.timestamp()
    # Deleted with the server's authority: the session's token could no longer do it.
    assert subscribers(keystone) == []


def test_a_session_closed_at_expiry_whose_client_never_answers_ends_without_spinning(
    keystone: Keystone, relay: SessionRelay
) -> None:
    client = Client(keystone, relay)
    looks: list[float] = []
    next_look = client.session._next_look

    def counted() -> float:
        looks.append(time.monotonic())
        return next_look()

    client.session._next_look = counted  # type: ignore[method-assign]
    token = keystone.token("alpha", expires=in_seconds(2))
    assert status(client.call("authenticate", {"X-Auth-Token": token})) == 200
    [close] = [e for e in client.events() if isinstance(e, CloseConnection)]
    assert close.code == AUTH_EXPIRED
    closed = time.monotonic()
    # Not answered: the session ends by itself once its close has waited CLOSING_S.
    client.wait_for_end()
    # The watchdog waited between its looks (it looked again at once, without end, when it
    # took the expiry it had acted on for one still to come).
    assert len([t for t in looks if t >= closed]) <= 2 * CLOSING_S / (CLOSING_S / 2) + 2


def test_no_push_reaches_a_session_after_its_token_expired(
    keystone: Keystone, relay: SessionRelay
) -> None:
    client = Client(keystone, relay)
    auth = client.call("authenticate", {"X-Auth-Token": keystone.token("alpha")})
    assert status(auth) == 200
    assert client.frames.expires_at is not None
    assert client.frames.expires_at > time.time() + 600  # the fixture's tokens last an hour
    assert client.session.notify(b'{"body": 1}')
    [pushed] = client.events()
    assert isinstance(pushed, TextMessage) and json.loads(pushed.data) == {"body": 1}
    client.frames.expires_at = time.time() - 1  # as if the hour had passed
    assert not client.session.notify(b'{"body": 2}')
    close = client.closed()
    assert close.code == AUTH_EXPIRED


def test_a_session_whose_token_keystone_comes_to_refuse_is_closed_and_its_subscriptions_go(
    keystone: Keystone, relay: SessionRelay
) -> None:
    token = keystone.token("alpha")
    client = Client(keystone, relay, token_recheck_s=0.5)
    assert status(client.call("authenticate", {"X-Auth-Token": token})) == 200
    assert status(client.call("subscription_create", {}, queue_name="q", ttl=600)) == 201
    assert len(subscribers(keystone)) == 1
    time.sleep(1.5)  # checked again meanwhile, and still accepted
    assert status(client.call("queue_list", {})) == 200
    keystone.tokens._token_data.pop(token)  # revoked
    assert keystone.call("GET", "/v2/queues", token=token).status_code == 401
    close = client.closed()
    assert (close.code, close.reason) == (AUTH_EXPIRED, "Authentication refused.")
    assert subscribers(keystone) == []


def test_authenticating_again_with_a_newer_token_keeps_the_session(
    keystone: Keystone, relay: SessionRelay
) -> None:
    client = Client(keystone, relay)
    first = keystone.token("alpha", expires=in_seconds(2))
    assert status(client.call("authenticate", {"X-Auth-Token": first})) == 200
    second = keystone.token("alpha")
    assert status(client.call("authenticate", {"X-Auth-Token": second})) == 200
    time.sleep(3)
    assert keystone.call("GET", "/v2/queues", token=first).status_code == 401
    assert status(client.call("queue_list", {})) == 200
    # A token keystone refuses leaves the session as it was.
    refused = client.call("authenticate", {"X-Auth-Token": "forged"})
    assert status(refused) == 401
    assert status(client.call("queue_list", {})) == 200
    client.close()


def test_a_subscription_made_through_a_pre_signed_url_goes_with_its_session(
    served: tuple[Keystone, Service], relay: SessionRelay
) -> None:
    keystone, clock = served[0], fake_clock(served[1])
    shared, client, made = subscribed_through_url(keystone, relay, clock, 3600)
    assert len(subscribers(keystone)) == 1
    # The signature allows no delete of it.
    denied = client.call(
        "subscription_delete",
        signed_headers(shared),
        queue_name="q",
        subscription_id=made["body"]["subscription_id"],
    )
    assert status(denied) == 404
    client.close()
    assert subscribers(keystone) == []


def test_a_subscription_made_through_a_pre_signed_url_goes_when_the_url_expires(
    served: tuple[Keystone, Service], relay: SessionRelay
) -> None:
    keystone, clock = served[0], fake_clock(served[1])
    shared, client, _ = subscribed_through_url(keystone, relay, clock, 60)
    time.sleep(3)  # longer than the watchdog waits between looks
    assert len(subscribers(keystone)) == 1
    clock.advance(seconds=61)
    # The URL has expired: it allows nothing now.
    again = client.call("subscription_create", signed_headers(shared), queue_name="q")
    assert status(again) == 404
    deadline = time.monotonic() + 15
    while subscribers(keystone):
        assert time.monotonic() < deadline, "the subscription outlived its pre-signed URL"
        time.sleep(0.1)
    # The session itself goes on.
    auth = client.call("authenticate", {"X-Auth-Token": keystone.token("alpha")})
    assert status(auth) == 200
    client.close()


def test_a_subscription_made_again_with_a_token_outlives_the_url_it_was_first_made_with(
    served: tuple[Keystone, Service], relay: SessionRelay
) -> None:
    keystone, clock = served[0], fake_clock(served[1])
    _, client, made = subscribed_through_url(keystone, relay, clock, 60)
    assert status(client.call("authenticate", {"X-Auth-Token": keystone.token("alpha")})) == 200
    # Asked again and again, with the token now: the same subscription, held once.
    for _ in range(20):
        again = client.call("subscription_create", {}, queue_name="q")
        assert status(again) == 201
        assert again["body"]["subscription_id"] == made["body"]["subscription_id"]
    clock.advance(seconds=61)
    time.sleep(3)  # longer than the watchdog waits between looks
    # The URL has expired, but the token's authority holds it for the session.
    assert len(subscribers(keystone)) == 1
    assert client.frames.own.held() == 1
    client.close()
    assert subscribers(keystone) == []
