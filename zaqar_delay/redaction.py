"""URIs as messages, logs and answers show them: secrets as ``***``, the rest as spelt.

A store URI (``storage.resolve.redact``) and a push subscriber (``push.subscribers.redacted``)
hide the password of their userinfo the same way; they differ in which query values are
secrets, which each says through ``secret``.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable


def masked(uri: str, secret: Callable[[str], bool]) -> str:
    """``uri`` with the password of its userinfo, and the value of each query option whose
    name (percent-decoded) ``secret`` holds true for, replaced by ``***``; the URI itself
    when nothing was. ValueError when the URI does not parse."""
    parts = urllib.parse.urlsplit(uri)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(f":{parts.password}@", ":***@")
    query = "&".join(_masked_option(option, secret) for option in parts.query.split("&"))
    if (netloc, query) == (parts.netloc, parts.query):
        return uri
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))


def _masked_option(option: str, secret: Callable[[str], bool]) -> str:
    name, has_value, _ = option.partition("=")
    if has_value and secret(urllib.parse.unquote(name)):
        return f"{name}=***"
    return option
