"""The relay pushes to self-subscribed WebSocket sessions arrive through
(``api/websocket/relay.py``), on a real loopback listener."""

from __future__ import annotations

import http.client
import socket
import time
import urllib.parse
from collections.abc import Iterator

import pytest

from zaqar_delay.api.websocket import relay as relay_module
from zaqar_delay.api.websocket.relay import SessionRelay
from zaqar_delay.clock import FakeClock
from zaqar_delay.push.sessions import is_session
from zaqar_delay.push.webhook import DELIVERY_ID_HEADER, SIGNATURE_HEADER, signature

KEY = "the-session-key"


@pytest.fixture
def relay() -> Iterator[SessionRelay]:
    found = SessionRelay("127.0.0.1", max_body=1000)
    yield found
    found.close()


def post(
    subscriber: str,
    body: bytes,
    length: str | None = None,
    key: str | None = KEY,
    signed: str | None = None,
    sent_ms: int | None = None,
) -> int:
    """POST ``body`` to the relay as a dispatcher does, signed with ``key`` (None: unsigned)
    at ``sent_ms`` (None: now), or with the signature header ``signed``."""
    target = urllib.parse.urlsplit(subscriber)
    assert target.hostname is not None
    connection = http.client.HTTPConnection(target.hostname, target.port, timeout=10)
    try:
        connection.putrequest("POST", target.path)
        connection.putheader("Content-Length", str(len(body)) if length is None else length)
        connection.putheader(DELIVERY_ID_HEADER, "delivery-1")
        if signed is not None:
            connection.putheader(SIGNATURE_HEADER, signed)
        elif key is not None:
            at_ms = time.time_ns() // 1_000_000 if sent_ms is None else sent_ms
            connection.putheader(SIGNATURE_HEADER, signature(key, at_ms, "delivery-1", body))
        connection.endheaders(body)
        return connection.getresponse().status
    finally:
        connection.close()


def test_a_push_reaches_its_session_and_no_other(relay: SessionRelay) -> None:
    received: list[bytes] = []
    subscriber = relay.subscriber("a" * 32, lambda body: received.append(body) is None, KEY)
    assert is_session(subscriber) and subscriber.startswith("zaqar-ws://127.0.0.1:")
    assert post(subscriber, b'{"body": 1}') == 204
    assert received == [b'{"body": 1}']
    other = subscriber.rsplit("/", 1)[0] + "/" + "b" * 32
    assert post(other, b"{}") == 410
    relay.forget("a" * 32)
    assert post(subscriber, b"{}") == 410
    assert received == [b'{"body": 1}']


def test_a_session_that_can_take_no_more_is_gone(relay: SessionRelay) -> None:
    subscriber = relay.subscriber("c" * 32, lambda body: False, KEY)
    assert post(subscriber, b"{}") == 410


def test_bodies_over_the_limit_or_without_a_length_are_refused(relay: SessionRelay) -> None:
    received: list[bytes] = []
    subscriber = relay.subscriber("d" * 32, lambda body: received.append(body) is None, KEY)
    assert post(subscriber, b"x" * 1001) == 413
    assert post(subscriber, b"{}", length="two") == 400
    assert received == []


def test_a_connection_that_sends_too_little_is_closed(
    relay: SessionRelay, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(relay_module, "IDLE_TIMEOUT_S", 0.3)
    received: list[bytes] = []
    subscriber = relay.subscriber("e" * 32, lambda body: received.append(body) is None, KEY)
    target = urllib.parse.urlsplit(subscriber)
    assert target.hostname is not None and target.port is not None
    for sent in (b"", b"POST /", b"POST /x HTTP/1.0\r\nContent-Length: 10\r\n\r\n{}"):
        with socket.create_connection((target.hostname, target.port), timeout=5) as idle:
            idle.sendall(sent)
            assert idle.recv(100) == b""  # closed by the relay, not timed out here
    assert post(subscriber, b"{}") == 204
    assert received == [b"{}"]


def test_a_push_not_signed_with_the_session_s_key_is_refused(relay: SessionRelay) -> None:
    # Whoever reads the project's subscriptions sees the subscriber, session id included:
    # knowing it must not let them put frames into the session.
    received: list[bytes] = []
    subscriber = relay.subscriber("f" * 32, lambda body: received.append(body) is None, KEY)
    assert post(subscriber, b'{"forged": 1}', key="another key") == 403
    assert post(subscriber, b'{"forged": 2}', key=None) == 503  # sent again, signed, by another
    for header in ("t=" + "9" * 5000 + ",v2=00", "v2=00", "t=1", "", "t=1,v2=" + "0" * 64):
        assert post(subscriber, b'{"forged": 3}', signed=header) == 403
    assert received == []
    assert post(subscriber, b'{"pushed": 3}') == 204
    assert received == [b'{"pushed": 3}']


def test_a_push_captured_on_its_way_cannot_be_replayed(relay: SessionRelay) -> None:
    # The relay's port and the session id are known to the project's readers; whoever could
    # also watch a push go by must not be able to send it into the session again.
    received: list[bytes] = []
    subscriber = relay.subscriber("g" * 32, lambda body: received.append(body) is None, KEY)
    now_ms = time.time_ns() // 1_000_000
    captured = signature(KEY, now_ms, "delivery-1", b'{"once": 1}')
    assert post(subscriber, b'{"once": 1}', signed=captured) == 204
    assert post(subscriber, b'{"once": 1}', signed=captured) == 204  # taken already
    assert received == [b'{"once": 1}']
    window_ms = relay_module.REPLAY_WINDOW_MS
    for sent_ms in (now_ms - window_ms - 1_000, now_ms + window_ms + 1_000, 1_000):
        assert post(subscriber, b'{"stale": 1}', sent_ms=sent_ms) == 403
    assert received == [b'{"once": 1}']
    assert post(subscriber, b'{"fresh": 1}', sent_ms=now_ms - window_ms + 5_000) == 204
    assert received == [b'{"once": 1}', b'{"fresh": 1}']


def test_the_relay_forgets_taken_pushes_two_windows_after_they_came() -> None:
    clock = FakeClock()
    relay = SessionRelay("127.0.0.1", max_body=1000, clock=clock)
    try:
        received: list[bytes] = []
        session = relay.subscriber("h" * 32, lambda body: received.append(body) is None, KEY)
        for n in range(50):
            assert post(session, b"{}", sent_ms=clock.now_ms() + n) == 204
        assert relay.taken() == 50
        clock.advance(ms=2 * relay_module.REPLAY_WINDOW_MS + 1)
        assert post(session, b"{}", sent_ms=clock.now_ms()) == 204
        assert relay.taken() == 1
        assert len(received) == 51
    finally:
        relay.close()
