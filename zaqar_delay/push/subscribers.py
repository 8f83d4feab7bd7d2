"""What a subscriber URI may look like, and how one is shown where others can read it.

A subscriber is a URI (RFC 3986): printable ASCII, anything else percent-encoded, at most
``MAX_LENGTH`` characters, that the standard library parses with its port. Refusing the rest
up front keeps odd input (a lone surrogate, an unclosed ``[``, a character that NFKC turns into
``#``) from reaching the resolver, the store or a log line.
"""

from __future__ import annotations

import re
import urllib.parse

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
    try:
        parts = urllib.parse.urlsplit(subscriber)
    except ValueError:
        return "<a malformed subscriber>"
    if parts.scheme == "mailto":
        return subscriber
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}:***@{host}"
    query = "&".join(_without_value(option) for option in parts.query.split("&") if option)
    if (netloc, query) == (parts.netloc, parts.query):
        return subscriber
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))


def _without_value(option: str) -> str:
    name, has_value, _ = option.partition("=")
    return f"{name}=***" if has_value else name
