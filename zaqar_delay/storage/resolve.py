"""Turns configured settings into a reachable store: starts the embedded Redis when asked."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import TYPE_CHECKING

from zaqar_delay import clock, redaction
from zaqar_delay.conf import Settings
from zaqar_delay.encryption import data_dir_key
from zaqar_delay.errors import StorageConfigError
from zaqar_delay.storage.traits import Durability
from zaqar_delay.storage.uri import embedded_db_path, open_driver

if TYPE_CHECKING:
    from zaqar_delay.storage.redis.embedded import EmbeddedRedis

# Longest wait for the threads of the closed store check to end (pymongo's end at once).
THREADS_END_S = 5.0


# Query options whose values are secrets: Zaqar's sentinel_password, redis-py's ssl_password,
# pymongo's tlsCertificateKeyFilePassword and authMechanismProperties (an AWS session token).
SECRET_OPTION_WORDS = ("password", "secret", "token", "authmechanismproperties")


def redact(uri: str) -> str:
    """The URI without its password or the values of secret query options (``***`` instead),
    for messages and answers; everything else as it is spelt."""
    return redaction.masked(uri, _is_secret_option)


def redact_in(text: str, uri: str | None) -> str:
    """``text`` (a message that may quote ``uri``) with ``uri`` redacted."""
    return text.replace(uri, redact(uri)) if uri else text


def _is_secret_option(name: str) -> bool:
    return any(word in name.lower() for word in SECRET_OPTION_WORDS)


@dataclasses.dataclass
class ResolvedStore:
    """Settings whose ``storage.uri`` points at a running store, and what to stop afterwards."""

    settings: Settings
    embedded: EmbeddedRedis | None
    warnings: list[str] = dataclasses.field(default_factory=list)
    durability: Durability | None = None  # what the store said of itself at start

    def keep_running(self) -> None:
        """One supervision round of the embedded store (restarted if it died); no-op for
        other stores, which their operators run."""
        if self.embedded is not None:
            self.embedded.keep_running()

    def close(self) -> None:
        if self.embedded is not None:
            self.embedded.close()
            self.embedded = None


def resolve_store(settings: Settings, now: clock.Clock | None = None) -> ResolvedStore:
    """Start the embedded Redis if the settings name it, check the store answers, prepare it,
    and tell how far ``now`` (the system clock by default) is from the store's clock: a
    warning when too far (:func:`zaqar_delay.clock.skew_warning`).

    On the embedded store without a configured message encryption key, the settings get the
    key kept in its data directory (generated on first start).

    Raises StorageConfigError with a one-line reason when the URI is invalid, the store does
    not answer, or the driver refuses the deployment.
    """
    embedded = None
    uri = settings.storage.uri
    db_path = embedded_db_path(settings)
    if db_path is not None:
        from zaqar_delay.storage.redis.embedded import embedded_store

        if settings.storage.replica_acks:
            raise StorageConfigError(
                f"[storage] replica_acks = {settings.storage.replica_acks} needs replicas, and the "
                "embedded store has none: set [storage] uri to a Redis primary with replicas "
                "(Redis Sentinel) or to a MongoDB replica set, or set replica_acks to 0"
            )

        try:
            embedded = embedded_store(db_path, settings.storage)
        except OSError as exc:  # an unwritable directory, a missing binary
            raise StorageConfigError(
                f"cannot start the embedded Redis at {db_path}: {exc}"
            ) from exc
        uri = embedded.uri
    storage = dataclasses.replace(settings.storage, uri=uri)
    resolved = ResolvedStore(dataclasses.replace(settings, storage=storage), embedded)
    try:
        if embedded is not None and not settings.encryption.key:
            encryption = dataclasses.replace(
                settings.encryption, key=data_dir_key(embedded.directory)
            )
            resolved.settings = dataclasses.replace(resolved.settings, encryption=encryption)
        running = set(threading.enumerate())
        driver = open_driver(uri, settings)
        try:
            reason = driver.unreachable_reason()
            if reason is not None:
                raise StorageConfigError(
                    f"cannot reach the message store at {redact(uri)}: {redact_in(reason, uri)}"
                )
            resolved.warnings = driver.prepare()
            resolved.durability = driver.durability()
            skewed = clock.skew_warning(driver.clock_ms, now or clock.SystemClock())
            resolved.warnings += [skewed] if skewed else []
        finally:
            driver.close()
            _join_threads_started_since(running)
    except Exception:
        resolved.close()
        raise
    return resolved


def _join_threads_started_since(running: set[threading.Thread]) -> None:
    """Wait for the threads a closed client started (pymongo's monitors) to end. The server
    forks its workers next: a thread still ending would be copied into each worker, half torn
    down, and fail there with a traceback."""
    deadline = time.monotonic() + THREADS_END_S
    for thread in set(threading.enumerate()) - running:
        thread.join(max(0.0, deadline - time.monotonic()))
