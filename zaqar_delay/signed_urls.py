"""Pre-signed URLs, compatible with Zaqar's: HMAC-SHA256 over paths, methods, project, expiry.

A signature lets its holder call the signed methods on the signed paths of one project's queue
until it expires, by sending the document's fields as the ``URL-Signature``, ``URL-Expires``,
``URL-Methods`` and ``URL-Paths`` headers (with ``X-Project-ID``). Unlike upstream Zaqar, a
signed path matches only itself and what lies under it (upstream treats it as an unanchored
regular expression).
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from typing import Any

from zaqar_delay import errors
from zaqar_delay.clock import Clock

EXPIRES_FORMAT = "%Y-%m-%dT%H:%M:%S"
SHAREABLE = frozenset({"messages", "subscriptions", "claims"})
KNOWN_KEYS = frozenset({"paths", "methods", "expires"})
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"})
DEFAULT_LIFETIME = datetime.timedelta(days=1)


def signature(
    secret: str, paths: Sequence[str], methods: Sequence[str], project: str, expires: str
) -> str:
    """Zaqar's signature: the fields joined by the two characters backslash and n."""
    body = "\\n".join([",".join(sorted(paths)), ",".join(sorted(methods)), project, expires])
    # "surrogatepass": a WebSocket frame's headers are JSON strings, which may hold lone
    # surrogates; they sign (and fail to match) like any other text.
    return hmac.new(
        secret.encode(), body.encode("utf-8", "surrogatepass"), hashlib.sha256
    ).hexdigest()


def _parse_expires(value: Any, now: datetime.datetime) -> datetime.datetime:
    if not isinstance(value, str):
        raise errors.InvalidRequest("`expires` should be a date, for example 2016-01-01T00:00:00")
    try:
        int(value)
    except ValueError:
        pass
    else:
        raise errors.InvalidRequest(
            "`expires` should be date format, for example 2016-01-01T00:00:00, not integer "
            f"value: {value}"
        )
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise errors.InvalidRequest(f"`expires` is not an ISO 8601 date: {value!r}") from exc
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(datetime.UTC).replace(tzinfo=None)
    if parsed <= now:
        raise errors.InvalidRequest("`expires` is lower than the current time")
    return parsed


def _choices(
    document: dict[str, Any], name: str, default: str, allowed: frozenset[str]
) -> list[str]:
    """``document[name]``: a list of strings out of ``allowed``, ``[default]`` when absent."""
    chosen = document.get(name) or [default]
    if not isinstance(chosen, list) or not all(isinstance(c, str) for c in chosen):
        raise errors.InvalidRequest(f"`{name}` must be a list of strings")
    invalid = set(chosen) - allowed
    if invalid:
        raise errors.InvalidRequest(f"Invalid {name}: {sorted(invalid)}")
    return chosen


def create(
    secret: str, project: str, queue_path: str, document: Any, now: datetime.datetime
) -> dict[str, Any]:
    """The share document for ``POST {queue_path}/share`` (``now`` is naive UTC).

    ``document`` may hold ``paths`` (of messages, subscriptions, claims; default messages),
    ``methods`` (default GET) and ``expires`` (ISO 8601; default one day from now).
    """
    if not secret:
        raise errors.Forbidden(
            "Pre-signed URLs are disabled on this server: [signed_url] secret_key is not set."
        )
    document = {} if document is None else document
    if not isinstance(document, dict):
        raise errors.InvalidBody("Document type not supported.")
    unknown = set(document) - KNOWN_KEYS
    if unknown:
        raise errors.InvalidRequest(f"Unknown keys: {sorted(unknown)}")
    paths = _choices(document, "paths", "messages", SHAREABLE)
    methods = _choices(document, "methods", "GET", METHODS)
    expires = (
        _parse_expires(document["expires"], now)
        if document.get("expires") is not None
        else now + DEFAULT_LIFETIME
    )
    full_paths = sorted({f"{queue_path}/{p}" for p in paths})
    methods = sorted(set(methods))
    expires_text = expires.strftime(EXPIRES_FORMAT)
    return {
        "project": project,
        "paths": full_paths,
        "methods": methods,
        "expires": expires_text,
        "signature": signature(secret, full_paths, methods, project, expires_text),
    }


def verify(
    secret: str, method: str, path: str, headers: Mapping[str, str], now: datetime.datetime
) -> bool:
    """True when the ``URL-*`` headers sign ``method`` on ``path`` for ``X-Project-ID``, now."""
    if not secret:
        return False
    given = headers.get("URL-SIGNATURE") or ""
    expires = headers.get("URL-EXPIRES") or ""
    project = headers.get("X-PROJECT-ID") or ""
    methods = [m for m in (headers.get("URL-METHODS") or "").split(",") if m]
    paths = [p for p in (headers.get("URL-PATHS") or "").split(",") if p]
    if method not in methods or not any(path == p or path.startswith(p + "/") for p in paths):
        return False
    expires_at = _expiry(expires)
    if expires_at is None or expires_at <= now:
        return False
    expected = signature(secret, paths, methods, project, expires)
    # As bytes: compare_digest refuses str with characters beyond ASCII, which a header can hold.
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogatepass"))


def expiry_of(headers: Mapping[str, str]) -> float | None:
    """When the pre-signed URL ``headers`` carry (``URL-Signature``, ``URL-Expires``, in any
    case) stops allowing requests, in epoch seconds; None when they carry none, or an expiry
    that allows nothing."""
    found = {name.lower(): value for name, value in headers.items()}
    if "url-signature" not in found:
        return None
    moment = _expiry(found.get("url-expires", ""))
    return None if moment is None else moment.replace(tzinfo=datetime.UTC).timestamp()


def _expiry(expires: str) -> datetime.datetime | None:
    """A ``URL-Expires`` value as the naive UTC time it names; None when it names none."""
    try:
        return datetime.datetime.strptime(expires, EXPIRES_FORMAT)
    except ValueError:
        return None


class Signer:
    """Creates and checks the pre-signed URLs of one deployment: its secret, its clock."""

    def __init__(self, secret: str, clock: Clock) -> None:
        self._secret = secret
        self._clock = clock

    def _utcnow(self) -> datetime.datetime:
        """The clock's time as a naive UTC datetime (the form pre-signed URLs use)."""
        now = datetime.datetime.fromtimestamp(self._clock.now_ms() / 1000, datetime.UTC)
        return now.replace(tzinfo=None)

    def share(self, project: str, queue: str, document: Any) -> dict[str, Any]:
        """A pre-signed URL document for the queue (see :func:`create`)."""
        return create(self._secret, project, f"/v2/queues/{queue}", document, self._utcnow())

    def sign(self, project: str, paths: Sequence[str], methods: Sequence[str]) -> dict[str, Any]:
        """A signature of exactly ``paths`` and ``methods`` for a day, or {} when pre-signed
        URLs are disabled (no secret)."""
        if not self._secret:
            return {}
        expires = (self._utcnow() + DEFAULT_LIFETIME).strftime(EXPIRES_FORMAT)
        return {
            "project": project,
            "paths": sorted(paths),
            "methods": sorted(methods),
            "expires": expires,
            "signature": signature(self._secret, paths, methods, project, expires),
        }

    def allows(self, method: str, path: str, headers: Mapping[str, str]) -> bool:
        """Whether the request's URL-* headers sign this method and path (see :func:`verify`)."""
        return verify(self._secret, method, path, headers, self._utcnow())
