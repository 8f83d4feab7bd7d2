"""The hops header a post carries and the limit it is checked against (``push_hops``)."""

from __future__ import annotations

import pytest

from zaqar_delay import errors, push_hops


@pytest.mark.parametrize(
    ("value", "hops"), [(None, 0), ("0", 0), ("3", 3), (" 12 ", 12), ("000007", 7)]
)
def test_a_header_gives_its_whole_number(value: str | None, hops: int) -> None:
    assert push_hops.of_header(value) == hops


@pytest.mark.parametrize("value", ["", "-1", "+1", "1.0", "1e3", "two", "٣", "1 2", "1234567"])
def test_a_header_that_is_no_whole_number_is_refused(value: str) -> None:
    with pytest.raises(errors.InvalidRequest, match=push_hops.HEADER):
        push_hops.of_header(value)


def test_the_limit_refuses_only_past_it() -> None:
    push_hops.check(4, 4)
    with pytest.raises(errors.PushLoopRefused, match="counts 5 hops"):
        push_hops.check(5, 4)
    assert errors.PushLoopRefused("x").title == "Push loop refused"


def test_a_push_carries_one_more_up_to_what_a_store_keeps() -> None:
    assert push_hops.onward(0) == 1
    assert push_hops.onward(254) == push_hops.MAX_KEPT == 255
    assert push_hops.onward(255) == 255


def test_each_message_of_a_post_made_by_a_push_after_the_first_counts_one_hop_more() -> None:
    assert push_hops.of_post(0, 1000) == 0  # a client's post
    assert push_hops.of_post(1, 1) == 1
    assert push_hops.of_post(2, 3) == 4
