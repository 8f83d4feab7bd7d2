"""Pushes to a WebSocket session that subscribed itself.

Such a subscription's subscriber is ``zaqar-ws://HOST:PORT/<session id>``: the relay of the
server process that holds the session (``api/websocket/relay.py``), which hands the push's
body to the session as a notification frame. Only the server makes such subscribers (the
subscription routes refuse the scheme from a client), so a push to one is sent without the
address guard. The body is a webhook push's (``webhook.request_body``); 2xx is delivered, and
a connection error, a timeout or a 5xx is retried as a webhook's is. A session that is gone
is a permanent failure that ends its subscription (``Outcome.subscriber_gone``): the relay
answers 410 for a session that ended, and refuses the connection when the process that held
the session is gone (it was killed, or restarted: sessions end with their process), since
its relay's port is then closed. Neither comes back: a session id is never used again.
"""

from __future__ import annotations

import http
import http.client
import urllib.parse

from zaqar_delay.models import Delivery
from zaqar_delay.push.webhook import (
    DELIVERY_ID_HEADER,
    SIGNATURE_HEADER,
    Outcome,
    PushTooLarge,
    outcome_of,
    request_body,
    signature,
)

SESSION_SCHEME = "zaqar-ws"


def is_session(subscriber: str) -> bool:
    """Whether ``subscriber`` names a WebSocket session (the server's own subscriber)."""
    return subscriber.startswith(SESSION_SCHEME + "://")


def session_subscriber(host: str, port: int, session_id: str) -> str:
    return f"{SESSION_SCHEME}://{host}:{port}/{session_id}"


class SessionSender:
    """Posts each push to the relay its subscriber names, one connection per push."""

    def __init__(self, timeout_s: float, max_body_bytes: int) -> None:
        self.timeout_s = timeout_s
        self.max_body_bytes = max_body_bytes

    def send(self, delivery: Delivery, now_ms: int) -> Outcome:
        target = urllib.parse.urlsplit(delivery.subscription.subscriber)
        if not target.hostname or not target.port:
            return Outcome("permanent", "the session subscriber names no relay")
        try:
            body = request_body(delivery, now_ms, self.max_body_bytes)
        except PushTooLarge as exc:
            return Outcome("permanent", str(exc))
        connection = http.client.HTTPConnection(
            target.hostname, target.port, timeout=self.timeout_s
        )
        headers = {
            "Content-Type": "application/json",
            DELIVERY_ID_HEADER: delivery.id,
            # The relay takes only pushes signed with the session's own key (the subscriber's
            # address, session id included, is shown to every reader of the project).
            SIGNATURE_HEADER: signature(delivery.subscription.secret, now_ms, delivery.id, body),
        }
        try:
            connection.request("POST", target.path, body, headers)
            answer = connection.getresponse()
            answer.read()
        except TimeoutError as exc:
            return Outcome("retry", f"timed out: {exc}")
        except ConnectionRefusedError:
            return Outcome(
                "permanent", "the session's server process is gone", subscriber_gone=True
            )
        except (OSError, http.client.HTTPException) as exc:
            return Outcome("retry", f"connection failed: {type(exc).__name__}: {exc}")
        finally:
            connection.close()
        if answer.status == http.HTTPStatus.GONE:
            return Outcome("permanent", "HTTP 410: the session has ended", subscriber_gone=True)
        return outcome_of(answer.status, answer.getheader("Retry-After"))
