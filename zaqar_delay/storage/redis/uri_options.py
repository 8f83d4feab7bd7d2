"""The query options a Redis URI may carry, and its TLS options as redis-py's arguments.

Zaqar reads ``dbid`` and ``socket_timeout`` (with ``master`` and the Sentinel credentials in a
Sentinel URI). A ``rediss://`` store whose certificate a private CA signed needs that CA, and a
store that asks clients for a certificate needs one: ``ssl_ca_certs``, ``ssl_certfile``,
``ssl_keyfile``, ``ssl_password``, ``ssl_cert_reqs`` (``none``, ``optional`` or ``required``,
the default) and ``ssl_check_hostname`` (``true``, the default, or ``false``), as redis-py
names them, on standalone, Sentinel and Cluster URIs alike.

Any other option is refused (a ``StorageConfigError``: the server does not start, a pool's
``uri`` answers 400; a pool an earlier release registered with one is opened without it,
:func:`without_refused`). redis-py would take it as an argument of its own: a misspelt one
(``sockettimeout``) fails every request with a ``TypeError``, ``max_connections`` and
``timeout`` replace the bounds ``[storage]`` sets, and ``protocol=3`` is a protocol the
driver is not tested with.
"""

from __future__ import annotations

import math
import os
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

from zaqar_delay.errors import StorageConfigError

#: The options of every standalone URI (``db`` is redis-py's spelling of Zaqar's ``dbid``,
#: the one a ``unix://`` URI takes).
STANDALONE = frozenset({"dbid", "db", "socket_timeout"})
#: A Sentinel URI's own options besides ``dbid`` and ``socket_timeout``.
SENTINEL = frozenset({"master", "sentinel_username", "sentinel_password", "sentinel_tls"})
#: The schemes of Redis URIs, and those with TLS.
SCHEMES = frozenset({"redis", "rediss", "unix", "redis+cluster", "rediss+cluster"})
TLS_SCHEMES = frozenset({"rediss", "rediss+cluster"})
CERT_REQS = ("none", "optional", "required")
BOOLEANS = {"true": True, "false": False}
FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
TLS = frozenset({*FILES, "ssl_password", "ssl_cert_reqs", "ssl_check_hostname"})
#: The numeric options, and their kind: a timeout is a positive number of seconds, a database
#: a number from 0 (checked here: redis-py takes nan, inf or -1 and fails at every request).
NUMBERS: Mapping[str, type] = {"socket_timeout": float, "dbid": int, "db": int}


def query_of(uri: str) -> dict[str, str]:
    """The URI's query options, the last of any given twice."""
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(uri).query, keep_blank_values=True))


def own_options(uri: str, query: Mapping[str, str]) -> frozenset[str]:
    """The options besides TLS's the client of ``uri`` takes: a cluster's ``socket_timeout``
    (a cluster has no databases), a Sentinel URI's (``master=``) its own, a standalone
    store's ``STANDALONE``."""
    if urllib.parse.urlsplit(uri).scheme.endswith("+cluster"):
        return frozenset({"socket_timeout"})
    if "master" in query:
        return SENTINEL | {"dbid", "socket_timeout"}
    return STANDALONE


def check_uri(uri: str) -> dict[str, Any]:
    """redis-py's TLS arguments for the Redis URI ``uri``, its options checked first:
    StorageConfigError for an option its client does not take, a number out of its range
    (``NUMBERS``) or a TLS option it cannot use."""
    query = query_of(uri)
    _check_known(uri, query, own_options(uri, query))
    for name, kind in NUMBERS.items():
        number(uri, query, name, kind, None)
    return _tls_arguments(uri, query, urllib.parse.urlsplit(uri).scheme in TLS_SCHEMES)


def number(uri: str, query: Mapping[str, str], name: str, kind: type, default: Any) -> Any:
    """The option ``name`` of ``query`` as a ``kind`` (``default`` when absent): a finite
    number from 0, above 0 for a float (a timeout of 0 would fail every read);
    StorageConfigError otherwise."""
    if name not in query:
        return default
    try:
        value = kind(query[name])
    except ValueError:
        value = -1
    if not math.isfinite(value) or value < 0 or (kind is float and value == 0):
        raise StorageConfigError(
            f"Invalid storage URI {uri!r}: {name}={query[name]!r} (it must be "
            + ("a number of seconds above 0)" if kind is float else "a whole number from 0)")
        )
    return value


def without_refused(uri: str) -> tuple[str, list[str]]:
    """The Redis URI ``uri`` without the query options :func:`check_uri` refuses by name
    (unknown ones, and TLS's without TLS), each other one as it is spelt; and their names."""
    parts = urllib.parse.urlsplit(uri)
    query = query_of(uri)
    taken = own_options(uri, query) | (TLS if parts.scheme in TLS_SCHEMES else frozenset())
    kept: list[str] = []
    dropped: list[str] = []
    for option in filter(None, parts.query.split("&")):
        name = urllib.parse.unquote_plus(option.partition("=")[0])
        if name in taken:
            kept.append(option)
        else:
            dropped.append(name)
    if not dropped:
        return uri, []
    return urllib.parse.urlunsplit(parts._replace(query="&".join(kept))), dropped


def _check_known(uri: str, query: Mapping[str, str], known: Iterable[str]) -> None:
    """StorageConfigError naming the first option of ``query`` not in ``known`` or TLS's."""
    allowed = TLS.union(known)
    unknown = sorted(set(query) - allowed)
    if unknown:
        raise StorageConfigError(
            f"Invalid storage URI {uri!r}: unknown option {unknown[0]!r} (a Redis URI takes "
            f"{', '.join(sorted(allowed))})"
        )


def _tls_arguments(uri: str, query: Mapping[str, str], tls: bool) -> dict[str, Any]:
    """redis-py's connection arguments for the URI's TLS options (none without them).

    StorageConfigError for a TLS option on a URI without TLS (``redis://``: the option would
    be ignored, or refused by redis-py's plain connection at the first request), a value
    redis-py would not take, or a file that cannot be read.
    """
    given = {name: value for name, value in query.items() if name in TLS}
    if given and not tls:
        raise StorageConfigError(
            f"Invalid storage URI {uri!r}: {sorted(given)[0]} is a TLS option; TLS needs "
            "rediss:// (rediss+cluster:// for a cluster)"
        )
    arguments: dict[str, Any] = {}
    for name, value in given.items():
        if name in FILES:
            if not os.access(value, os.R_OK):
                raise StorageConfigError(
                    f"Invalid storage URI {uri!r}: {name}={value!r} is no file this server can read"
                )
            arguments[name] = value
        elif name == "ssl_cert_reqs":
            if value not in CERT_REQS:
                raise StorageConfigError(
                    f"Invalid storage URI {uri!r}: ssl_cert_reqs={value!r}: use none, "
                    "optional or required"
                )
            arguments[name] = value
        elif name == "ssl_check_hostname":
            if value.lower() not in BOOLEANS:
                raise StorageConfigError(
                    f"Invalid storage URI {uri!r}: ssl_check_hostname={value!r}: use true or false"
                )
            arguments[name] = BOOLEANS[value.lower()]
        else:
            arguments[name] = value
    return arguments
