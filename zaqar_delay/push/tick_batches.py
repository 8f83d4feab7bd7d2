"""How many of a schedule tick queue's due ticks a dispatcher leases at once, and for how long.

A tick queue's due ticks are leased together, fired in one call in this process and held in
one request slot (``push/dispatcher.py``).
"""

from __future__ import annotations

from zaqar_delay.models import Delivery

# Ticks of schedules leased at once from one tick queue: fired together, in one request slot.
TICKS_PER_BATCH = 200
# How long a batch of ticks is leased: a tick held by a process that died, or whose outcome
# the store could not record (an outage), fires again this soon. Two overlapping fires of a
# tick (a fire slower than this) post nothing twice: every post they make has a dedup id.
TICK_LEASE_MS = 5000
# Tick queues whose batch size a process keeps (all forgotten at once when full).
SIZED_TICK_QUEUES = 10_000


class TickBatches:
    """Each tick queue's next batch size, where it is not ``TICKS_PER_BATCH``."""

    def __init__(self) -> None:
        self._sizes: dict[tuple[str, str], int] = {}

    def size(self, project: str, queue: str) -> int:
        return self._sizes.get((project, queue), TICKS_PER_BATCH)

    def fired(self, ticks: list[Delivery], took_ms: int, lease_ms: int) -> None:
        """Size the next batch of the ticks' queue by how long their fire took: more than
        half their lease halves it, so that a fire ends before its ticks may be leased
        again (by another dispatcher, which would repeat the work); a full batch fired in
        under a quarter of it doubles it, up to ``TICKS_PER_BATCH``. The ticks a smaller
        batch leaves are leased in the next rounds, into other request slots."""
        key = (ticks[0].project, ticks[0].queue)
        batch = self._sizes.get(key, TICKS_PER_BATCH)
        if took_ms > lease_ms // 2:
            batch = max(1, min(batch, len(ticks)) // 2)
        elif took_ms < lease_ms // 4 and len(ticks) >= batch:
            batch = min(TICKS_PER_BATCH, batch * 2)
        if batch == TICKS_PER_BATCH:
            self._sizes.pop(key, None)
            return
        if len(self._sizes) >= SIZED_TICK_QUEUES:
            self._sizes.clear()
        self._sizes[key] = batch
