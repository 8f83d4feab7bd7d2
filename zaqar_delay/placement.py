"""Which pool a new queue is placed on: one chosen by weight among those that answer.

A queue is placed once and never moves. Placed on a pool whose store does not answer (down,
cut off, stopped), its first write and every retry would answer 503 until that store came
back, however many other pools of its flavor answer, and the catalog would list a queue that
its store never got. So a placement first asks the pool it chose whether its store answers
(one round trip, once in a queue's life); one that does not is passed over for another of
the candidates, and left out of this process's placements for ``UNANSWERED_FOR_S`` without
being asked again. When none of the candidates answers, nothing is placed and the write
answers 503.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from zaqar_delay import errors
from zaqar_delay.storage.catalog import PoolRecord

#: How long a pool whose store did not answer a placement is left out of placements before
#: it is asked again: long enough that an outage costs few placements the wait for an answer
#: (up to the store's socket timeout), short enough that a store back takes queues again soon.
UNANSWERED_FOR_S = 30.0

Choose = Callable[[list[PoolRecord]], PoolRecord]


class Placement:
    """Chooses a pool for a new queue with ``choose`` among the candidates whose store
    ``answers`` (a pool's name: whether its store answers now)."""

    def __init__(
        self,
        choose: Choose,
        answers: Callable[[str], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._choose = choose
        self._answers = answers
        self._clock = clock
        self._lock = threading.Lock()
        self._unanswered: dict[str, float] = {}  # pool -> when it did not answer

    def choose(self, candidates: list[PoolRecord]) -> str:
        """The pool to place a queue on; StorageUnavailable when no candidate answers. Pools
        that did not answer lately are asked only when every candidate is one of them."""
        now = self._clock()
        with self._lock:
            for pool, since in list(self._unanswered.items()):
                if now - since >= UNANSWERED_FOR_S:
                    del self._unanswered[pool]
            unanswered = set(self._unanswered)
        remaining = [p for p in candidates if p.name not in unanswered] or list(candidates)
        while remaining:
            chosen = self._choose(remaining)
            if self._answers(chosen.name):
                with self._lock:
                    self._unanswered.pop(chosen.name, None)
                return chosen.name
            with self._lock:
                self._unanswered[chosen.name] = self._clock()
            remaining.remove(chosen)
        names = ", ".join(sorted(p.name for p in candidates))
        raise errors.StorageUnavailable(
            f"no pool that takes the queue answers ({names}): it was not created"
        )

    def unanswered(self) -> set[str]:
        """The pools left out of placements now."""
        with self._lock:
            return set(self._unanswered)
