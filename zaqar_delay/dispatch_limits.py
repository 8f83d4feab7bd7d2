"""Dispatch limits of a subscription, in its options (as Cloud Tasks' queue settings):

``_max_dispatches_per_second``
    pushes sent per second at most (a number > 0); one every 1/rate seconds, no bursts.
``_max_concurrent_dispatches``
    requests in flight at most (an integer from 1 to 1,000).

They hold across every server process: the store keeps each subscription's next free time
and its requests in flight, and leases a push only within them (``lua/push.lua``,
``storage/mongodb/pushes.py``). A push held back by the rate is owed again at the time the
limit reserves for it; one held back by concurrency waits, parked, until a request of its
subscription ends (or its lease runs out). The option names are read by the store's scripts
too; ``tests/unit/test_policy.py`` fails when the two drift apart.

A module of its own, beside ``subscriptions.py``: the service checks the limits and the
stores apply them, and ``storage`` imports nothing of ``push`` (``lint-imports``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from zaqar_delay import errors, validation

MAX_DISPATCHES_PER_SECOND = "_max_dispatches_per_second"
MAX_CONCURRENT_DISPATCHES = "_max_concurrent_dispatches"
OPTIONS = (MAX_DISPATCHES_PER_SECOND, MAX_CONCURRENT_DISPATCHES)

MAX_RATE = 100_000
MAX_CONCURRENCY = 1_000


def check(options: Any) -> None:
    """InvalidRequest when ``options`` (a subscription's) set a limit out of range."""
    if not isinstance(options, dict):
        return
    rate = options.get(MAX_DISPATCHES_PER_SECOND)
    if rate is not None and (
        isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= MAX_RATE
    ):
        raise errors.InvalidRequest(
            f"{MAX_DISPATCHES_PER_SECOND} must be a number greater than 0 and at most {MAX_RATE}."
        )
    concurrency = options.get(MAX_CONCURRENT_DISPATCHES)
    if concurrency is not None and (
        not validation.is_int(concurrency) or not 1 <= concurrency <= MAX_CONCURRENCY
    ):
        raise errors.InvalidRequest(
            f"{MAX_CONCURRENT_DISPATCHES} must be an integer from 1 to {MAX_CONCURRENCY}."
        )


@dataclasses.dataclass(frozen=True, slots=True)
class DispatchLimits:
    """The limits a subscription's options set: milliseconds between two pushes, requests in
    flight (None: no limit)."""

    interval_ms: float | None = None
    concurrency: int | None = None

    @classmethod
    def of(cls, options: Any) -> DispatchLimits:
        """The limits of stored (checked) options."""
        if not isinstance(options, dict):
            return cls()
        rate = options.get(MAX_DISPATCHES_PER_SECOND)
        concurrency = options.get(MAX_CONCURRENT_DISPATCHES)
        return cls(
            1000 / rate if isinstance(rate, int | float) and rate > 0 else None,
            concurrency if validation.is_int(concurrency) else None,
        )
