"""The service's only source of time: UTC epoch milliseconds, injectable for tests."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Anything that tells the current UTC time in epoch milliseconds."""

    def now_ms(self) -> int: ...


class SystemClock:
    """The machine's wall clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class FakeClock:
    """A clock that only moves when told to; lets tests cross due times without sleeping."""

    def __init__(self, start_ms: int = 1_800_000_000_000) -> None:
        self._now_ms = start_ms

    def now_ms(self) -> int:
        return self._now_ms

    def advance(self, seconds: float = 0.0, ms: int = 0) -> None:
        self._now_ms += int(seconds * 1000) + ms
