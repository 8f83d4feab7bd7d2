"""The service's only source of time: UTC epoch nanoseconds, injectable for tests.

Instants are compared in whole milliseconds (``now_ms``, floored); a due time computed from a
post's arrival is rounded *up* to the millisecond (:func:`arrival`), so that comparing a
floored "now" with it never finds a message due before its post's arrival plus its delay.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

NS_PER_MS = 1_000_000
#: How far a server's clock may be from its store's before it is warned of: every due time
#: and claim expiry is read from the clock of the server a request reached, so two servers
#: this far apart may deliver a message up to twice this early (the manual's scaling-out).
SKEW_WARNING_MS = 250


class Clock(Protocol):
    """Anything that tells the current UTC time in epoch nanoseconds."""

    def now_ns(self) -> int: ...

    def now_ms(self) -> int: ...


def arrival(clock: Clock) -> tuple[int, int]:
    """A request's arrival: ``now_ms`` (floored), and the round-up, 1 when the arrival lies
    after the start of that millisecond, else 0: what a relative delay counted from ``now_ms``
    must add to end on or after arrival + delay."""
    now_ns = clock.now_ns()
    return now_ns // NS_PER_MS, 1 if now_ns % NS_PER_MS else 0


class SystemClock:
    """The machine's wall clock."""

    def now_ns(self) -> int:
        return time.time_ns()

    def now_ms(self) -> int:
        return time.time_ns() // NS_PER_MS


class FakeClock:
    """A clock that only moves when told to; lets tests cross due times without sleeping."""

    def __init__(self, start_ms: int = 1_800_000_000_000) -> None:
        self._now_ns = start_ms * NS_PER_MS

    def now_ns(self) -> int:
        return self._now_ns

    def now_ms(self) -> int:
        return self._now_ns // NS_PER_MS

    def advance(self, seconds: float = 0.0, ms: int = 0, us: int = 0) -> None:
        self._now_ns += int(seconds * 1000) * NS_PER_MS + ms * NS_PER_MS + us * 1000


def store_offset_ms(read_store_ms: Callable[[], int | None], clock: Clock) -> int | None:
    """How far the store's clock is ahead of ``clock`` (negative: behind), against the middle
    of one read of it (``read_store_ms``); None when the store shows no clock."""
    before = clock.now_ms()
    store_ms = read_store_ms()
    after = clock.now_ms()
    return None if store_ms is None else store_ms - (before + after) // 2


def skew_warning(read_store_ms: Callable[[], int | None], clock: Clock) -> str | None:
    """A warning when the store's clock (``read_store_ms``) is more than
    :data:`SKEW_WARNING_MS` from ``clock`` either way (:func:`store_offset_ms`); None
    otherwise, and when the store shows no clock."""
    offset_ms = store_offset_ms(read_store_ms, clock)
    if offset_ms is None or abs(offset_ms) <= SKEW_WARNING_MS:
        return None
    side = "behind" if offset_ms > 0 else "ahead of"
    return (
        f"this host's clock is {abs(offset_ms)} ms {side} the message store's: every due time "
        "and claim expiry is read from the clock of the server a request reaches, so keep "
        "the hosts' clocks synchronised (NTP or chrony)"
    )
