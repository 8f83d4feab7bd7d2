"""Placing a new queue on a pool whose store answers (``placement.py``), and how long a pool
that did not answer is left alone (``silent_pools.py``)."""

from __future__ import annotations

import pytest

from zaqar_delay import errors, silent_pools
from zaqar_delay.placement import Placement
from zaqar_delay.silent_pools import SilentPools
from zaqar_delay.storage.catalog import PoolRecord


def pools(*names: str) -> list[PoolRecord]:
    return [PoolRecord(name=name, uri=f"redis://{name}:6379", weight=100) for name in names]


class Stores:
    """Which pools answer, and which were asked."""

    def __init__(self, *down: str) -> None:
        self.down = set(down)
        self.asked: list[str] = []

    def answers(self, pool: str) -> bool:
        self.asked.append(pool)
        return pool not in self.down


def first(candidates: list[PoolRecord]) -> PoolRecord:
    return candidates[0]


def test_a_pool_that_does_not_answer_is_passed_over_then_left_alone_a_while() -> None:
    now = [1000.0]
    stores = Stores("a")
    silent = SilentPools(clock=lambda: now[0])
    chooser = Placement(first, stores.answers, silent)
    assert chooser.choose(pools("a", "b", "c")) == "b"
    assert stores.asked == ["a", "b"]
    assert silent.now() == {"a"}
    stores.asked.clear()
    assert chooser.choose(pools("a", "b", "c")) == "b"
    assert stores.asked == ["b"], "a pool that did not answer lately is not asked again"
    # Asked again once its time is out; it answers now, and takes queues again.
    stores.down.clear()
    now[0] += silent_pools.SILENT_FOR_S
    assert silent.now() == set()
    stores.asked.clear()
    assert chooser.choose(pools("a", "b", "c")) == "a"
    assert stores.asked == ["a"]


def test_when_no_pool_answers_nothing_is_placed() -> None:
    stores = Stores("a", "b")
    silent = SilentPools()
    chooser = Placement(first, stores.answers, silent)
    with pytest.raises(errors.StorageUnavailable):
        chooser.choose(pools("a", "b"))
    assert stores.asked == ["a", "b"]
    # Every candidate did not answer lately: each is asked again rather than none.
    stores.down.discard("b")
    assert chooser.choose(pools("a", "b")) == "b"
    assert silent.now() == {"a"}


def test_a_pool_that_answers_again_is_no_longer_left_alone() -> None:
    stores = Stores("b")
    silent = SilentPools()
    chooser = Placement(first, stores.answers, silent)
    assert chooser.choose(pools("b", "c")) == "c"
    assert silent.now() == {"b"}
    # "b" is left out, but a placement whose only candidate it is still asks it.
    stores.down.clear()
    assert chooser.choose(pools("b")) == "b"
    assert silent.now() == set()
    assert stores.asked == ["b", "c", "b"]
