"""Reserving a send time from a subscription's rate (``dispatch_limits``), written once for
the stores whose shared writes are compare-and-set (MongoDB, Swift); Redis does the same
inside its push script, in one round trip.

A subscription's rate is one shared state (:class:`RateState`): the next free *slot* (ms), an
*offset*, and the last send time it gave. A push takes a slot once: the next free one, never
before ``owed_ms`` nor before now, which moves the next free slot one interval on. The push
keeps it while it waits (its store remembers it), and is sent at its slot plus the offset,
but never before now nor within an interval of the last send.

When either of those holds the push back, the offset grows to match, so every slot after it
moves on with it. Dispatchers that stopped for a while so find the times reserved during the
stop passed, and send the first of those pushes now and the next an interval later, not all
at once; a push sent after one that holds a later slot (it waited for a request place) is
sent an interval after it. The offset only grows, and the last send only moves on, so two
sends of one subscription are an interval apart at least.

Every write names the version it read; a dispatcher that lost the race reads again, at most
``RATE_ATTEMPTS`` times.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Protocol

from zaqar_delay.storage.bounds import RATE_ATTEMPTS


@dataclasses.dataclass(frozen=True, slots=True)
class RateState:
    """A subscription's rate: the next free slot (ms), the offset (ms) added to a slot to
    give its send time, and the last send time given (None: none yet)."""

    free_ms: float
    offset_ms: int = 0
    last_ms: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class RateRequest:
    """What a lease asks of a rate for one push: the slot it holds (None: it takes the next
    free one), when it is owed, the lease's now and time, and the rate's interval."""

    slot_ms: int | None
    owed_ms: int
    now_ms: int
    until_ms: int
    interval_ms: float


@dataclasses.dataclass(frozen=True, slots=True)
class RateTime:
    """The time a push is sent at, and the slot of the rate it holds."""

    send_ms: int
    slot_ms: int


class RateCell(Protocol):
    """Where a store keeps one subscription's rate."""

    def read(self) -> tuple[RateState | None, object]:
        """The rate (None: never taken) and the version a :meth:`replace` must name."""

    def replace(self, version: object, state: RateState) -> bool:
        """Set the rate to ``state`` if it is still at ``version`` (creating it when
        ``version`` says it did not exist); False when another write came first."""


def take(cell: RateCell, request: RateRequest) -> RateTime | None:
    """The push's slot (taken now if it holds none) and its send time, recorded as the last
    send when it is within the lease's time; None when other dispatchers kept changing the
    rate."""
    for _ in range(RATE_ATTEMPTS):
        found, version = cell.read()
        state = found or RateState(0.0)
        timed, after = timed_by(state, request)
        if after == found or cell.replace(version, after):
            return timed
    return None


def timed_by(state: RateState, request: RateRequest) -> tuple[RateTime, RateState]:
    """The push's slot and send time under ``state``, and the state after it."""
    interval_ms, offset_ms, free_ms = request.interval_ms, state.offset_ms, state.free_ms
    slot_ms = request.slot_ms
    if slot_ms is None:
        slot_ms = math.ceil(max(max(request.owed_ms, request.now_ms) - offset_ms, free_ms))
        free_ms = slot_ms + interval_ms
    after_last = -math.inf if state.last_ms is None else state.last_ms + interval_ms
    send_ms = math.ceil(max(slot_ms + offset_ms, request.now_ms, after_last))
    last_ms = send_ms if send_ms <= request.until_ms else state.last_ms
    return RateTime(send_ms, slot_ms), RateState(free_ms, send_ms - slot_ms, last_ms)
