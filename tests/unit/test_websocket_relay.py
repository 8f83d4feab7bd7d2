"""The relay pushes to self-subscribed WebSocket sessions arrive through
(``api/websocket/relay.py``), on a real loopback listener."""

from __future__ import annotations

import http.client
import socket
import urllib.parse
from collections.abc import Iterator

import pytest

from zaqar_delay.api.websocket import relay as relay_module
from zaqar_delay.api.websocket.relay import SessionRelay
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
) -> int:
    """POST ``body`` to the relay as a dispatcher does, signed with ``key`` (None: unsigned),
    or with the signature header ``signed``."""
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
            connection.putheader(SIGNATURE_HEADER, signature(key, 1_000, "delivery-1", body))
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
