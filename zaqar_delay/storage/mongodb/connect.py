"""Builds a pymongo client and picks the database from a mongodb:// URI."""

from __future__ import annotations

from typing import Any

import pymongo
from pymongo import uri_parser
from pymongo.errors import ConfigurationError, InvalidURI

from zaqar_delay.errors import StorageConfigError


def mongo_client(
    uri: str,
    timeout_s: float,
    max_connections: int = 64,
    replica_acks: int = 0,
    replica_ack_timeout_s: float = 1.0,
) -> tuple[pymongo.MongoClient[dict[str, Any]], str | None]:
    """A client writing with a journaled write concern, and the URI's database name.

    The write concern is majority, or ``replica_acks`` + 1 members when that is asked (the
    driver refuses at start a count below a majority or above the set's size), waiting at
    most ``replica_ack_timeout_s``. Majority acknowledgement means a message whose post
    returned 201 survives the loss of the primary; on a standalone server it is the server's
    own journaled write. Connections are made lazily, and pymongo reconnects by itself when
    the server comes back.
    """
    timeout_ms = int(timeout_s * 1000)
    concern: dict[str, Any] = {"w": "majority"}
    if replica_acks:
        concern = {"w": replica_acks + 1, "wTimeoutMS": max(1, round(replica_ack_timeout_s * 1000))}
    try:
        database = uri_parser.parse_uri(uri, connect_timeout=timeout_s)["database"]
        client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
            uri,
            journal=True,
            serverSelectionTimeoutMS=timeout_ms,
            connectTimeoutMS=timeout_ms,
            socketTimeoutMS=timeout_ms,
            retryWrites=True,
            maxPoolSize=max_connections,
            waitQueueTimeoutMS=timeout_ms,
            connect=False,
            **concern,
        )
    except (InvalidURI, ConfigurationError, ValueError) as exc:
        raise StorageConfigError(f"Invalid storage URI {uri!r}: {exc}") from exc
    return client, database
