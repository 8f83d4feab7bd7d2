"""One push of a message to an ``http(s)://`` subscriber, and what its answer means.

The body is Zaqar's webhook payload: the message as the API shows it plus ``queue_name``, or
the subscription's ``post_data`` template with ``"$zaqar_message$"`` replaced by it; its
``post_headers`` are sent too. Every request carries a stable delivery id and an HMAC-SHA256
signature over the timestamp and the body, keyed with the subscription's secret:

    X-Zaqar-Delay-Signature: t=<ms>,v1=<hex of HMAC-SHA256(secret, "<ms>." + body)>

2xx is delivered; a timeout, a connection error, 429 and 5xx are retried (``Retry-After``
honoured); any other answer is permanent. Redirects are not followed.
"""

from __future__ import annotations

import dataclasses
import email.utils
import hashlib
import hmac
import json
import time
from typing import Any

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from zaqar_delay import jsondoc
from zaqar_delay.models import Delivery
from zaqar_delay.push.guard import AddressGuard, DeniedAddress

DELIVERY_ID_HEADER = "X-Zaqar-Delay-Delivery-Id"
SIGNATURE_HEADER = "X-Zaqar-Delay-Signature"
ATTEMPT_HEADER = "X-Zaqar-Delay-Attempt"
TEMPLATE = '"$zaqar_message$"'


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """What an attempt came to: ``delivered``, ``retry`` (with the receiver's ``Retry-After``
    in seconds, if it gave one) or ``permanent``; ``error`` says why it failed."""

    kind: str
    error: str = ""
    retry_after_s: float = 0.0


def message_document(delivery: Delivery, now_ms: int) -> dict[str, Any]:
    """Zaqar's webhook payload: the message as listed, and the queue's name."""
    message = delivery.message
    return {
        "id": message.id,
        "href": f"/v2/queues/{delivery.queue}/messages/{message.id}",
        "ttl": message.ttl_s,
        "age": message.age_s(now_ms),
        "body": message.body,
        "queue_name": delivery.queue,
    }


def request_body(delivery: Delivery, now_ms: int) -> bytes:
    document = jsondoc.dumps(message_document(delivery, now_ms))
    template = delivery.subscription.options.get("post_data")
    if isinstance(template, str):
        return template.replace(TEMPLATE, document).encode()
    if template is not None:
        return json.dumps(template).replace(TEMPLATE, document).encode()
    return document.encode()


def signature(secret: str, timestamp_ms: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp_ms}.".encode() + body, hashlib.sha256)
    return f"t={timestamp_ms},v1={mac.hexdigest()}"


def _retry_after_s(value: str | None, now_s: float) -> float:
    if not value:
        return 0.0
    if value.strip().isdigit():
        return float(value.strip())
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - now_s)
    except (TypeError, ValueError):
        return 0.0


def outcome_of(status: int, retry_after: str | None) -> Outcome:
    if 200 <= status < 300:
        return Outcome("delivered")
    error = f"HTTP {status}"
    if status == 429 or status >= 500:
        return Outcome("retry", error, _retry_after_s(retry_after, time.time()))
    return Outcome("permanent", error)


class WebhookSender:
    """Sends pushes over pooled connections that only reach addresses ``guard`` permits."""

    def __init__(self, guard: AddressGuard, timeout_s: float, pool_size: int = 64) -> None:
        self.guard = guard
        self.timeout_s = timeout_s
        self.session = requests.Session()
        adapter = _GuardedAdapter(guard, pool_maxsize=pool_size, max_retries=0)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def send(self, delivery: Delivery, now_ms: int) -> Outcome:
        body = request_body(delivery, now_ms)
        options = delivery.subscription.options
        headers = {"Content-Type": "application/json"}
        extra = options.get("post_headers")
        if isinstance(extra, dict):
            headers.update({str(k): str(v) for k, v in extra.items()})
        headers[DELIVERY_ID_HEADER] = delivery.id
        headers[ATTEMPT_HEADER] = str(delivery.attempts + 1)
        headers[SIGNATURE_HEADER] = signature(delivery.subscription.secret, now_ms, body)
        return self.post(delivery.subscription.subscriber, body, headers)

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> Outcome:
        """POST ``body`` to ``url`` once, through the guard, without following redirects."""
        try:
            response = self.session.post(
                url, data=body, headers=headers, timeout=self.timeout_s, allow_redirects=False
            )
        except DeniedAddress as exc:
            return Outcome("permanent", str(exc))
        except requests.exceptions.ConnectionError as exc:
            if isinstance(exc.__context__, DeniedAddress) or "pushes may not reach" in str(exc):
                return Outcome("permanent", f"refused address: {exc}")
            return Outcome("retry", f"connection failed: {exc}")
        except requests.RequestException as exc:
            return Outcome("retry", f"{type(exc).__name__}: {exc}")
        response.close()
        return outcome_of(response.status_code, response.headers.get("Retry-After"))

    def close(self) -> None:
        self.session.close()


def _guarded(connection: type[HTTPConnection], guard: AddressGuard) -> type[HTTPConnection]:
    """``connection`` checking the address it connected to before anything is sent."""

    class Guarded(connection):  # type: ignore[valid-type,misc]
        def _new_conn(self) -> Any:
            sock = super()._new_conn()
            address = sock.getpeername()[0]
            if not guard.permits(address):
                sock.close()
                raise DeniedAddress(f"{self.host} is {address}, which pushes may not reach")
            return sock

    return Guarded


class _GuardedAdapter(HTTPAdapter):
    def __init__(self, guard: AddressGuard, **kwargs: Any) -> None:
        self._guard = guard
        super().__init__(**kwargs)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        http = type(
            "GuardedHTTPPool",
            (HTTPConnectionPool,),
            {"ConnectionCls": _guarded(HTTPConnection, self._guard)},
        )
        https = type(
            "GuardedHTTPSPool",
            (HTTPSConnectionPool,),
            {"ConnectionCls": _guarded(HTTPSConnection, self._guard)},
        )
        manager: urllib3.PoolManager = self.poolmanager
        manager.pool_classes_by_scheme = {"http": http, "https": https}
        manager.key_fn_by_scheme = manager.key_fn_by_scheme.copy()
