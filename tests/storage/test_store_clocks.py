"""Each store's own clock, which the service compares with its own at start and in
``zaqar-delay-status upgrade check``: every due time and claim expiry is read from the clock
of the server a request reaches, so a host whose clock is far from the others' is warned of."""

from __future__ import annotations

import tempfile
import time
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from testbed.processes import free_port
from zaqar_delay.clock import SKEW_WARNING_MS, FakeClock, SystemClock, store_offset_ms
from zaqar_delay.conf import Settings, StorageSettings
from zaqar_delay.metrics import Metrics
from zaqar_delay.storage.resolve import resolve_store
from zaqar_delay.storage.uri import open_driver
from zaqar_delay.stores import Stores


def test_the_stores_clock_is_read(driver: Any) -> None:
    before = time.time_ns() // 1_000_000
    read = driver.clock_ms()
    after = time.time_ns() // 1_000_000
    # The store runs on this machine: its clock is this one, read between the two readings.
    assert before - 1 <= read <= after + 1
    assert abs(store_offset_ms(driver.clock_ms, SystemClock()) or 0) <= SKEW_WARNING_MS


def clock_warnings(warnings: list[str]) -> list[str]:
    return [w for w in warnings if "clock" in w]


def test_a_server_clock_far_from_the_stores_is_warned_of_at_start() -> None:
    settings = Settings(storage=StorageSettings(data_dir=tempfile.mkdtemp(prefix="zd-clock-")))
    ahead = FakeClock(time.time_ns() // 1_000_000 + 5_000)
    resolved = resolve_store(settings, now=ahead)
    try:
        [warning] = clock_warnings(resolved.warnings)
    finally:
        resolved.close()
    milliseconds = int(warning.split()[4])
    assert 4_000 <= milliseconds <= 5_000, warning
    assert warning == (
        f"this host's clock is {milliseconds} ms ahead of the message store's: every due "
        "time and claim expiry is read from the clock of the server a request reaches, so "
        "keep the hosts' clocks synchronised (NTP or chrony)"
    )
    behind = FakeClock(time.time_ns() // 1_000_000 - 5_000)
    resolved = resolve_store(settings, now=behind)
    try:
        [warning] = clock_warnings(resolved.warnings)
        assert " ms behind the message store's" in warning
    finally:
        resolved.close()
    resolved = resolve_store(settings)  # the system clock: the store's own
    try:
        assert clock_warnings(resolved.warnings) == []
    finally:
        resolved.close()


def clock_offsets(metrics: Metrics) -> dict[str, float]:
    return {
        sample.labels["store"]: sample.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for sample in family.samples
        if sample.name == "zaqar_delay_store_clock_offset_seconds"
    }


def test_each_scrape_shows_the_stores_clock_against_the_servers(driver: Any) -> None:
    ahead = FakeClock(time.time_ns() // 1_000_000 + 5_000)
    offsets = clock_offsets(Metrics(Stores(driver), ahead))
    # This server's clock 5 s ahead: the store's is 5 s behind it (a negative offset).
    assert list(offsets) == ["default"]
    assert -5.0 <= offsets["default"] <= -4.0, offsets
    assert abs(clock_offsets(Metrics(Stores(driver), SystemClock()))["default"]) <= 0.25


def test_a_scrape_leaves_out_the_clock_of_a_store_that_does_not_answer() -> None:
    gone = open_driver(f"redis://127.0.0.1:{free_port()}/0", Settings())
    try:
        assert gone.unreachable_reason() is not None, "the store answers"
        assert clock_offsets(Metrics(Stores(gone), SystemClock())) == {}
    finally:
        gone.close()
