"""What a subscriber URI may look like, and how one is shown where others can read it.

A subscriber is a URI (RFC 3986): printable ASCII, anything else percent-encoded, at most
``MAX_LENGTH`` characters, that the standard library parses with its port. Refusing the rest
up front keeps odd input (a lone surrogate, an unclosed ``[``, a character that NFKC turns into
``#``) from reaching the resolver, the store or a log line.
"""

from __future__ import annotations

import re
import urllib.parse

from zaqar_delay import redaction

MAX_LENGTH = 2048
URI = re.compile(r"^[\x21-\x7e]+$")


def parse(subscriber: str) -> urllib.parse.SplitResult:
    """``subscriber`` split into its parts; ValueError (with a message a person can act on)
    when it is not such a URI."""
    if len(subscriber) > MAX_LENGTH or not URI.match(subscriber):
        raise ValueError(
            f"The subscriber must be a URI of at most {MAX_LENGTH} printable ASCII characters, "
            "with any other character percent-encoded."
        )
    try:
        parts = urllib.parse.urlsplit(subscriber)
        parts.port  # noqa: B018 - parsed for its ValueError on a bad port
    except ValueError as exc:
        raise ValueError(f"The subscriber is not a valid URI: {exc}.") from exc
    return parts


def redacted(subscriber: str) -> str:
    """``subscriber`` as logs and dead letters show it: the password of its userinfo and the
    value of every query option are ``***``. A receiver's secret often rides in the query
    (``?token=``, ``?code=``, ``?sig=``) under a name no list would foresee, so none is shown;
    the names stay, to tell subscribers apart."""
    if subscriber[:7].lower() == "mailto:":
        return subscriber
    try:
        return redaction.masked(subscriber, lambda name: True)
    except ValueError:
        return "<a malformed subscriber>"
