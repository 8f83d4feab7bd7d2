"""Reserving a send time from a subscription's rate (``dispatch_limits``), written once for
the stores whose shared writes are compare-and-set (MongoDB, Swift); Redis does the same
inside its push script, in one round trip.

A subscription's rate is one shared value, the next free time (ms). A push owed at
``owed_ms`` is sent at ``max(owed_ms, free)``, rounded up to a millisecond, and moves the
free time one interval past that, if nobody moved it since it was read: a dispatcher that
lost the race reads it again, at most ``RATE_ATTEMPTS`` times.
"""

from __future__ import annotations

import math
from typing import Protocol

from zaqar_delay.storage.bounds import RATE_ATTEMPTS


class RateCell(Protocol):
    """Where a store keeps one subscription's next free time."""

    def read(self) -> tuple[float | None, object]:
        """The next free time (None: the rate was never taken) and the version a
        :meth:`replace` must name."""

    def replace(self, version: object, free_ms: float) -> bool:
        """Set the next free time to ``free_ms`` if it is still at ``version`` (creating it
        when ``version`` says it did not exist); False when another write came first."""


def reserve(cell: RateCell, owed_ms: int, interval_ms: float) -> int | None:
    """The time the rate gives a push owed at ``owed_ms``, reserved for it (the free time
    moved one ``interval_ms`` past it); None when other dispatchers kept moving it."""
    for _ in range(RATE_ATTEMPTS):
        free_ms, version = cell.read()
        send_ms = math.ceil(max(owed_ms, free_ms or 0.0))
        if cell.replace(version, send_ms + interval_ms):
            return send_ms
    return None
