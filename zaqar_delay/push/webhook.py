"""One push of a message to an ``http(s)://`` subscriber, and what its answer means.

The body is the message as the API shows it plus ``queue_name`` and Zaqar's ``Message_Type``
(``Notification``; confirmations are of other types). With a ``post_data`` template, its
``"$zaqar_message$"`` is replaced by Zaqar's own notification, the message as posted: ``body``,
``ttl``, ``queue_name`` and ``Message_Type``. A template embeds the message in a request to
another API (another queue, Heat, Mistral), built by Zaqar clients against Zaqar's shape; the
delivery id header still names the message, and ``X-Zaqar-Delay-Hops`` counts the pushes
it came through, this one included (``push_hops``: a post past the limit is refused, so a
loop of subscriptions ends). The ``post_headers`` are sent too, but for those
that would frame or route the request (``push.headers``). Every request carries a stable
delivery id and an HMAC-SHA256 signature over the timestamp, the delivery id and the body,
keyed with the subscription's secret:

    X-Zaqar-Delay-Signature: t=<ms>,v2=<hex of HMAC-SHA256(secret, "<ms>.<delivery id>." + body)>

(the delivery id is empty on a request that carries none: a confirmation request). A receiver
checks the signature and refuses a timestamp older than a few minutes: a captured request
cannot then be replayed later, nor under another delivery id.

2xx is delivered; a timeout, a connection error, 429 and 5xx are retried (``Retry-After``
honoured); any other answer is permanent. Redirects are not followed.
"""

from __future__ import annotations

import dataclasses
import email.utils
import hashlib
import hmac
import http.client
import json
import time
from typing import Any

import zaqar_delay
from zaqar_delay import jsondoc, push_hops, topics
from zaqar_delay.keystone.trusts import Trusts
from zaqar_delay.models import Delivery
from zaqar_delay.push import headers as post_headers
from zaqar_delay.push.connections import ConnectionPool
from zaqar_delay.push.guard import AddressGuard, DeniedAddress
from zaqar_delay.push.trusts import TRUST_ID, TrustRefused, is_trust, target_of

DELIVERY_ID_HEADER = "X-Zaqar-Delay-Delivery-Id"
SIGNATURE_HEADER = "X-Zaqar-Delay-Signature"
ATTEMPT_HEADER = "X-Zaqar-Delay-Attempt"
TEMPLATE = '"$zaqar_message$"'
TEMPLATE_BYTES = TEMPLATE.encode()
# The largest request body a push sends: the largest message post and the largest
# subscription document (where a post_data template lives), so a template holding the
# message once always fits.
MAX_BODY_BYTES = 262_144 + 65_536
# Zaqar's Message_Type of a message's push (confirmations are SubscriptionConfirmation...).
NOTIFICATION = "Notification"
USER_AGENT = f"zaqar-delay/{zaqar_delay.__version__}"
# A receiver's Retry-After is honoured up to a day: a larger one would push a retry's time
# past what the store keeps, and past any message's life anyway.
MAX_RETRY_AFTER_S = 86_400.0


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """What an attempt came to: ``delivered``, ``retry`` (with the receiver's ``Retry-After``
    in seconds, if it gave one) or ``permanent``; ``error`` says why it failed. (The
    dispatcher's ``unconfirmed``: not sent, the subscription is not confirmed; ``unsent``:
    given back, the dispatcher stopped first or leased it too late to send.)
    ``subscriber_gone``: no push will ever reach the subscriber again (a WebSocket session
    that ended), so its subscription ends too."""

    kind: str
    error: str = ""
    retry_after_s: float = 0.0
    subscriber_gone: bool = False


def message_document(delivery: Delivery, now_ms: int) -> dict[str, Any]:
    """Zaqar's webhook payload: the message as listed, and the queue's name."""
    message = delivery.message
    return {
        "id": message.id,
        "href": f"{topics.href(delivery.queue)}/messages/{message.id}",
        "ttl": message.ttl_s,
        "age": message.age_s(now_ms),
        "body": message.body,
        "queue_name": topics.public_name(delivery.queue),
    }


def zaqar_notification(delivery: Delivery) -> dict[str, Any]:
    """Zaqar's notification of a message: as posted (``body``, ``ttl``), its queue, its type."""
    return {
        "body": delivery.message.body,
        "ttl": delivery.message.ttl_s,
        "queue_name": topics.public_name(delivery.queue),
        "Message_Type": NOTIFICATION,
    }


class PushTooLarge(ValueError):
    """A push's request body would be larger than a push may send."""


def request_body(delivery: Delivery, now_ms: int, most_bytes: int) -> bytes:
    """The request body of a push of ``delivery``; PushTooLarge past ``most_bytes``, found
    before the body is built. A template may name the message many times: one of 54 KB
    naming it 3,000 times made a 50 KB message a request of 150 MB, built in the
    dispatcher's memory and sent to whatever the subscriber names."""
    template = delivery.subscription.options.get("post_data")
    if template is None:
        payload = {**message_document(delivery, now_ms), "Message_Type": NOTIFICATION}
        return jsondoc.dumps(payload).encode()
    document = jsondoc.dumps(zaqar_notification(delivery)).encode()
    text = (template if isinstance(template, str) else json.dumps(template)).encode()
    copies = text.count(TEMPLATE_BYTES)
    size = len(text) + copies * (len(document) - len(TEMPLATE_BYTES))
    if size > most_bytes:
        raise PushTooLarge(
            f"the request body would be {size} bytes, more than the {most_bytes} a push may "
            f"send (post_data holds the message {copies} times)"
        )
    return text.replace(TEMPLATE_BYTES, document)


def signature(secret: str, timestamp_ms: int, delivery_id: str, body: bytes) -> str:
    """The signature header's value for a request sent at ``timestamp_ms``."""
    signed = f"{timestamp_ms}.{delivery_id}.".encode() + body
    mac = hmac.new(secret.encode(), signed, hashlib.sha256)
    return f"t={timestamp_ms},v2={mac.hexdigest()}"


def signed_at(secret: str, header: str, delivery_id: str, body: bytes) -> int | None:
    """When (ms) the signature header ``header`` of a request carrying ``delivery_id`` and
    ``body`` says it was signed, if it was made with ``secret``; None otherwise."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    sent_ms = fields.get("t", "")
    if not (sent_ms.isascii() and sent_ms.isdigit() and len(sent_ms) <= 20):
        return None
    expected = signature(secret, int(sent_ms), delivery_id, body)
    return int(sent_ms) if hmac.compare_digest(expected, header) else None


def _retry_after_s(value: str | None, now_s: float) -> float:
    """A ``Retry-After`` in seconds, at most ``MAX_RETRY_AFTER_S``."""
    if not value:
        return 0.0
    if value.strip().isdigit():
        return min(float(value.strip()), MAX_RETRY_AFTER_S)
    try:
        later_s = email.utils.parsedate_to_datetime(value).timestamp() - now_s
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return min(max(0.0, later_s), MAX_RETRY_AFTER_S)


def outcome_of(status: int, retry_after: str | None) -> Outcome:
    if 200 <= status < 300:
        return Outcome("delivered")
    error = f"HTTP {status}"
    if status == 429 or status >= 500:
        return Outcome("retry", error, _retry_after_s(retry_after, time.time()))
    return Outcome("permanent", error)


class WebhookSender:
    """Sends pushes over keep-alive connections that only reach addresses ``guard`` permits."""

    def __init__(
        self,
        guard: AddressGuard,
        timeout_s: float,
        pool_size: int = 32,
        trusts: Trusts | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        """``pool_size``: idle connections kept per receiver (the dispatcher's concurrency);
        ``trusts``: where the token of a push to a ``trust+`` subscriber comes from (without
        them such a push carries none); ``max_body_bytes``: the largest request body a push
        sends (a larger one fails for good, unsent)."""
        self.trusts = trusts
        self.max_body_bytes = max_body_bytes
        self.timeout_s = timeout_s
        self.connections = ConnectionPool(guard, timeout_s, pool_size)

    def request(self, delivery: Delivery, now_ms: int) -> tuple[bytes, dict[str, str]]:
        """The body and headers of the push of ``delivery`` signed at ``now_ms``, without a
        trust's token (PushTooLarge: the body would exceed ``max_body_bytes``)."""
        body = request_body(delivery, now_ms, self.max_body_bytes)
        options = delivery.subscription.options
        headers = {"Content-Type": "application/json", **post_headers.sendable(options)}
        headers[DELIVERY_ID_HEADER] = delivery.id
        headers[ATTEMPT_HEADER] = str(delivery.attempts + 1)
        headers[push_hops.HEADER] = str(push_hops.onward(delivery.message.hops))
        headers[SIGNATURE_HEADER] = signature(
            delivery.subscription.secret, now_ms, delivery.id, body
        )
        return body, headers

    def send(self, delivery: Delivery, now_ms: int) -> Outcome:
        try:
            body, headers = self.request(delivery, now_ms)
        except PushTooLarge as exc:
            return Outcome("permanent", str(exc))
        options = delivery.subscription.options
        subscriber = delivery.subscription.subscriber
        trust_id = options.get(TRUST_ID)
        if is_trust(subscriber) and self.trusts is not None and isinstance(trust_id, str):
            try:
                headers["X-Auth-Token"] = self.trusts.token(trust_id)
            except TrustRefused as exc:
                return Outcome("permanent", f"the trust was refused: {exc}")
            except OSError as exc:
                return Outcome("retry", str(exc))
        return self.post(target_of(subscriber), body, headers)

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> Outcome:
        """POST ``body`` to ``url`` once, through the guard, without following redirects."""
        headers = {"User-Agent": USER_AGENT, **headers}
        try:
            answer = self.connections.post(url, body, headers)
        except DeniedAddress as exc:
            return Outcome("permanent", f"refused address: {exc}")
        except ValueError as exc:
            return Outcome("permanent", str(exc))
        except TimeoutError as exc:
            return Outcome("retry", f"timed out: {exc}")
        except (OSError, http.client.HTTPException) as exc:
            return Outcome("retry", f"connection failed: {type(exc).__name__}: {exc}")
        return outcome_of(answer.status, answer.retry_after)

    def close(self) -> None:
        self.connections.close()
