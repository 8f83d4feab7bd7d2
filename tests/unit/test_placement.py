"""Placing a new queue on a pool whose store answers (``placement.py``)."""

from __future__ import annotations

import pytest

from zaqar_delay import errors, placement
from zaqar_delay.placement import Placement
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


def test_a_pool_that_does_not_answer_is_passed_over_then_left_out_for_a_while() -> None:
    now = [1000.0]
    stores = Stores("a")
    chooser = Placement(first, stores.answers, clock=lambda: now[0])
    assert chooser.choose(pools("a", "b", "c")) == "b"
    assert stores.asked == ["a", "b"]
    assert chooser.unanswered() == {"a"}
    stores.asked.clear()
    assert chooser.choose(pools("a", "b", "c")) == "b"
    assert stores.asked == ["b"], "a pool that did not answer lately is not asked again"
    # Asked again once its time is out; it answers now, and takes queues again.
    stores.down.clear()
    now[0] += placement.UNANSWERED_FOR_S
    stores.asked.clear()
    assert chooser.choose(pools("a", "b", "c")) == "a"
    assert stores.asked == ["a"] and chooser.unanswered() == set()


def test_when_no_pool_answers_nothing_is_placed() -> None:
    stores = Stores("a", "b")
    chooser = Placement(first, stores.answers)
    with pytest.raises(errors.StorageUnavailable):
        chooser.choose(pools("a", "b"))
    assert stores.asked == ["a", "b"]
    # Every candidate did not answer lately: each is asked again rather than none.
    stores.down.discard("b")
    assert chooser.choose(pools("a", "b")) == "b"
    assert chooser.unanswered() == {"a"}


def test_choices_stay_among_the_candidates_given() -> None:
    stores = Stores("b")
    chooser = Placement(first, stores.answers)
    assert chooser.choose(pools("b", "c")) == "c"
    # "b" is left out, but a placement whose only candidate it is still asks it.
    with pytest.raises(errors.StorageUnavailable):
        chooser.choose(pools("b"))
    assert stores.asked == ["b", "c", "b"]
