"""The pools whose store did not answer lately, which a process leaves alone for a while.

A store that does not answer at all (stopped, cut off without a refusal) holds whoever asks
it for its whole socket timeout. New queues are not placed on such a pool (``placement.py``),
and the push dispatcher's rounds, which ask every store what it owes, leave it out
(``PooledStores.named``), so the other pools' queues and pushes go on without waiting on it.
A pool is asked again ``SILENT_FOR_S`` after it last did not answer: what it owes is leased
at most that much late once it is back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: How long a pool whose store did not answer is left alone before it is asked again: a
#: store that never answers then holds up one placement and one dispatcher round of each
#: process per period, and one that is back takes queues and pushes again within it.
SILENT_FOR_S = 10.0


class SilentPools:
    """Pools by name, each with when it last did not answer, forgotten ``SILENT_FOR_S``
    later or as soon as it answers."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._since: dict[str, float] = {}

    def did_not_answer(self, pool: str) -> None:
        with self._lock:
            self._since[pool] = self._clock()

    def answered(self, pool: str) -> None:
        with self._lock:
            self._since.pop(pool, None)

    def heard(self, pool: str, answers: bool) -> bool:
        """Record whether ``pool`` answered when asked; returns ``answers``."""
        (self.answered if answers else self.did_not_answer)(pool)
        return answers

    def now(self) -> set[str]:
        """The pools left alone now."""
        now = self._clock()
        with self._lock:
            for pool, since in list(self._since.items()):
                if now - since >= SILENT_FOR_S:
                    del self._since[pool]
            return set(self._since)
