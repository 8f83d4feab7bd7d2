"""Which candidates a claim tries once concurrent claims have taken some of its first choice.

Concurrent claims read the same oldest claimable messages and all but one lose each of them.
A claim that lost some lists more of the oldest than it still wants and tries a random choice
of them, so concurrent claims mostly try different messages; a claim that meets no
contention keeps strict due order. The MongoDB and Swift drivers take messages this way (the
Redis driver takes them in one script, which nothing interleaves with)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

Candidate = TypeVar("Candidate")


def contended_choice(candidates: Sequence[Candidate], wanted: int) -> list[Candidate]:
    """``wanted`` of ``candidates`` chosen at random, in their given order; all of them when
    there are no more than ``wanted``."""
    if len(candidates) <= wanted:
        return list(candidates)
    chosen = sorted(random.sample(range(len(candidates)), wanted))
    return [candidates[i] for i in chosen]
