"""The choice a claim that lost candidates to concurrent claims makes among the oldest."""

from __future__ import annotations

from zaqar_delay.storage.contention import contended_choice


def test_all_candidates_when_no_more_than_wanted() -> None:
    assert contended_choice(["a", "b"], 2) == ["a", "b"]
    assert contended_choice(["a"], 3) == ["a"]
    assert contended_choice([], 1) == []


def test_wanted_distinct_candidates_in_their_given_order() -> None:
    candidates = list(range(40))
    choices = [contended_choice(candidates, 4) for _ in range(50)]
    for chosen in choices:
        assert len(set(chosen)) == 4 and set(chosen) <= set(candidates)
        assert chosen == sorted(chosen)
    # Random, so concurrent claims mostly try different ones: not always the oldest four.
    assert len({tuple(c) for c in choices}) > 1
