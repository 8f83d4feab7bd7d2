"""Each store's own clock, which the service compares with its own at start and in
``zaqar-delay-status upgrade check``: every due time and claim expiry is read from the clock
of the server a request reaches, so a host whose clock is far from the others' is warned of."""

from __future__ import annotations

import tempfile
import time
from typing import Any

from zaqar_delay.clock import SKEW_WARNING_MS, FakeClock, SystemClock, store_offset_ms
from zaqar_delay.conf import Settings, StorageSettings
from zaqar_delay.storage.resolve import resolve_store


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
