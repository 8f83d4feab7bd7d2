"""``zaqar-delay-status upgrade check`` against real stores: each check's success, warning
and failure, and oslo.upgradecheck's exit codes (0, 1, 2)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis

from testbed.processes import RedisServer, SecantusServer
from testbed.swift_aio import SwiftAllInOne
from zaqar_delay.conf import load_settings
from zaqar_delay.storage.uri import open_driver

pytestmark = pytest.mark.functional


def upgrade_check(tmp_path: Path, conf_text: str) -> tuple[int, str]:
    conf = tmp_path / f"status-{uuid.uuid4().hex[:6]}.conf"
    conf.write_text(conf_text)
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "zaqar_delay.cmd.status",
            "--config-file",
            str(conf),
            "upgrade",
            "check",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # The table's cells, wrapped over lines, joined into one text.
    return ran.returncode, " ".join(w for w in ran.stdout.split() if w.strip("+-|"))


def result_of(table: str, check: str) -> str:
    """``Success``, ``Warning`` or ``Failure``: the result the table gives ``check``."""
    after = table.split(f"Check: {check} Result", 1)[1]
    after = "Result" + after
    return after.split("Result: ", 1)[1].split(" ", 1)[0]


def test_a_redis_with_fsync_always_and_nothing_pending_passes(tmp_path: Path) -> None:
    server = RedisServer(aof=True, extra_args=["--appendfsync", "always"]).start()
    try:
        code, table = upgrade_check(tmp_path, f"[storage]\nuri = {server.url}\n")
    finally:
        server.stop()
    assert code == 0, table
    checks = ("Store durability", "Store settings", "Clock")
    assert [result_of(table, c) for c in checks] == ["Success", "Success", "Success"]
    assert "survives process crash, power loss" in table


def test_a_redis_without_persistence_fails_durability_and_warns_of_its_settings(
    tmp_path: Path,
) -> None:
    server = RedisServer(aof=False).start()
    try:
        client = redis.Redis(server.host, server.port)
        assert client.config_get("appendonly")["appendonly"] == "no"
        code, table = upgrade_check(tmp_path, f"[storage]\nuri = {server.url}\n")
    finally:
        server.stop()
    assert code == 2, table
    assert result_of(table, "Store durability") == "Failure"
    assert result_of(table, "Store settings") == "Warning"
    assert "neither an append-only file nor a replica" in table


def test_a_redis_that_evicts_keys_fails_the_settings_check(tmp_path: Path) -> None:
    server = RedisServer(
        aof=True, extra_args=["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"]
    ).start()
    try:
        code, table = upgrade_check(tmp_path, f"[storage]\nuri = {server.url}\n")
    finally:
        server.stop()
    assert code == 2, table
    assert result_of(table, "Store settings") == "Failure"
    assert "evicts keys under memory pressure" in table


def test_mongodb_indexes_not_built_yet_are_pending_until_the_server_starts(
    tmp_path: Path, secantus_server: SecantusServer
) -> None:
    uri = secantus_server.database_url(f"status{uuid.uuid4().hex[:8]}")
    conf_text = f"[storage]\nuri = {uri}\nunreliable = true\n"
    code, table = upgrade_check(tmp_path, conf_text)
    assert result_of(table, "Pending schema changes") == "Warning", table
    assert "to build at the next start" in table
    assert code == 1  # warnings: a standalone server, indexes to build
    # What the server does at start.
    driver = open_driver(uri, load_settings([]))
    try:
        driver.prepare()
    finally:
        driver.close()
    code, table = upgrade_check(tmp_path, conf_text)
    assert result_of(table, "Pending schema changes") == "Success", table


def test_an_unreachable_store_fails_every_check(tmp_path: Path) -> None:
    code, table = upgrade_check(tmp_path, "[storage]\nuri = redis://127.0.0.1:1/0\n")
    assert code == 2
    assert table.count("Result: Failure") == 4
    assert "cannot reach the store at redis://127.0.0.1:1/0: Error 111 connecting" in table


@pytest.mark.parametrize(
    ("conf_text", "reason"),
    [
        ("[notification]\nrequire_confirmation = true\n", "needs [signed_url] secret_key"),
        ("[drivers]\nmessage_store = mongodb\n", "needs [drivers:message_store:mongodb] uri"),
        ("[server]\nworkers = many\n", "workers"),
    ],
)
def test_a_configuration_the_server_would_refuse_fails_every_check(
    tmp_path: Path, conf_text: str, reason: str
) -> None:
    code, table = upgrade_check(tmp_path, conf_text)
    assert code == 2 and "Traceback" not in table
    assert table.count("Result: Failure") == 4
    assert reason in table


@pytest.mark.parametrize(("reclaim", "result"), [("true", "Success"), ("false", "Warning")])
def test_a_swift_store_keeping_dedup_records_unreclaimed_is_warned_of(
    tmp_path: Path, swift_aio: SwiftAllInOne, reclaim: str, result: str
) -> None:
    """``dedup_reclaim = false`` is for a rolling upgrade: left so, the store grows."""
    conf = (
        f"[storage]\nuri = {swift_aio.store_uri}\n"
        f"[drivers:message_store:swift]\ndedup_reclaim = {reclaim}\n"
    )
    code, table = upgrade_check(tmp_path, conf)
    assert result_of(table, "Store settings") == result, table
    assert ("dedup_reclaim is false" in table) == (reclaim == "false"), table
    assert code == (0 if reclaim == "true" else 1), table
