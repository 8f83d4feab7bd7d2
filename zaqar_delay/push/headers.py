"""The ``post_headers`` a subscription may add to its pushes, checked once for both the
subscribe and the send.

A push is a request the service makes on a tenant's behalf, over connections it keeps alive, so a
header that changes how the request is framed or routed (``Content-Length``,
``Transfer-Encoding``, ``Host``, the hop-by-hop headers, ``Proxy-*``) would let a tenant
smuggle a second request to the receiver or to whatever sits in front of it. Those, and the
service's own ``X-Zaqar-Delay-*`` headers (the signature a receiver trusts), are refused when
subscribing; names must be RFC 9110 tokens and values must hold no control characters (no CR or
LF) and nothing beyond Latin-1 (a push could not send it). Subscriptions stored before these
rules are sent without the headers that break them.
"""

from __future__ import annotations

import re
from typing import Any

from zaqar_delay import errors

KEY = "post_headers"
MAX_HEADERS = 50
MAX_HEADER_BYTES = 8192
# RFC 9110 token characters.
TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# Field values: visible ASCII, spaces and tabs, and obs-text; no other control characters.
FIELD_VALUE = re.compile(r"^[\t\x20-\x7e\x80-\xff]*$")
FORBIDDEN = frozenset(
    {
        "content-length",
        "transfer-encoding",
        "connection",
        "host",
        "upgrade",
        "te",
        "trailer",
        "keep-alive",
    }
)
FORBIDDEN_PREFIXES = ("proxy-", "x-zaqar-delay-")


def refusal(name: Any, value: Any) -> str | None:
    """Why the header ``name: value`` may not be sent with a push (None: it may)."""
    if not isinstance(name, str) or not TOKEN.match(name):
        return f"the header name {name!r} is not an HTTP token"
    lowered = name.lower()
    if lowered in FORBIDDEN or lowered.startswith(FORBIDDEN_PREFIXES):
        return f"the header {name} is set by the service, not by a subscription"
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return f"the value of the header {name} must be a string"
    text = str(value)
    if not FIELD_VALUE.match(text):
        beyond = next((c for c in text if ord(c) > 0xFF), None)
        if beyond is not None:  # HTTP sends header values as Latin-1 bytes
            return f"the value of the header {name} holds {beyond!r}, beyond Latin-1"
        return f"the value of the header {name} holds a control character (CR, LF, ...)"
    return None


def check(options: Any) -> None:
    """InvalidRequest when ``options["post_headers"]`` (a subscription's) is not a set of
    headers a push may carry."""
    if not isinstance(options, dict) or options.get(KEY) is None:
        return
    headers = options[KEY]
    if not isinstance(headers, dict):
        raise errors.InvalidRequest("post_headers must be an object of header names and values.")
    if len(headers) > MAX_HEADERS:
        raise errors.InvalidRequest(f"post_headers may hold at most {MAX_HEADERS} headers.")
    size = 0
    for name, value in headers.items():
        reason = refusal(name, value)
        if reason is not None:
            raise errors.InvalidRequest(f"post_headers: {reason}.")
        size += len(name) + len(str(value))
    if size > MAX_HEADER_BYTES:
        raise errors.InvalidRequest(
            f"post_headers may hold at most {MAX_HEADER_BYTES} characters of names and values."
        )


def sendable(options: Any) -> dict[str, str]:
    """The ``post_headers`` of stored options that a push may carry (the others dropped)."""
    headers = options.get(KEY) if isinstance(options, dict) else None
    if not isinstance(headers, dict):
        return {}
    return {name: str(value) for name, value in headers.items() if refusal(name, value) is None}
