"""Which pool a new queue is placed on: one chosen by weight among those that answer.

A queue is placed once and never moves. Placed on a pool whose store does not answer (down,
cut off, stopped), its first write and every retry would answer 503 until that store came
back, however many other pools of its flavor answer, and the catalog would list a queue that
its store never got. So a placement first asks the pool it chose whether its store answers
(one round trip, once in a queue's life); one that does not is passed over for another of
the candidates and left alone a while (``silent_pools.py``). When none of the candidates
answers, nothing is placed and the write answers 503.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from zaqar_delay import errors
from zaqar_delay.silent_pools import SilentPools
from zaqar_delay.storage.catalog import PoolRecord

Choose = Callable[[list[PoolRecord]], PoolRecord]


class Placement:
    """Chooses a pool for a new queue with ``choose`` among the candidates whose store
    ``answers`` (a pool's name: whether its store answers now), leaving out those ``silent``
    says did not answer lately unless every candidate is one of them."""

    def __init__(self, choose: Choose, answers: Callable[[str], bool], silent: SilentPools) -> None:
        self._choose = choose
        self._answers = answers
        self._silent = silent

    def choose(self, candidates: list[PoolRecord]) -> str:
        """The pool to place a queue on; StorageUnavailable when no candidate answers."""
        silent = self._silent.now()
        remaining = [p for p in candidates if p.name not in silent] or list(candidates)
        while remaining:
            chosen = self._choose(remaining)
            if self._silent.heard(chosen.name, self._answers(chosen.name)):
                return chosen.name
            remaining.remove(chosen)
        names = ", ".join(sorted(p.name for p in candidates))
        raise errors.StorageUnavailable(
            f"no pool that takes the queue answers ({names}): it was not created"
        )


def by_weight(candidates: list[PoolRecord]) -> PoolRecord:
    """A pool at random, each in proportion to its weight."""
    return random.choices(candidates, weights=[p.weight for p in candidates])[0]
