"""The push lease's length: three push timeouts, grown by the dispatcher's slow store calls."""

from __future__ import annotations

from zaqar_delay.push.lease_length import MAX_GROWTH_LEASES, REMEMBERED_CALLS, LeaseLength


def test_a_fast_store_gets_three_push_timeouts() -> None:
    length = LeaseLength(push_timeout_ms=1000)
    assert length.lease_ms() == 3000
    length.record(2)
    assert length.lease_ms() == 3004


def test_the_lease_grows_by_twice_the_slowest_recent_call_up_to_a_bound() -> None:
    length = LeaseLength(push_timeout_ms=1000)
    length.record(1500)
    length.record(100)
    assert length.lease_ms() == 3000 + 3000
    length.record(10**9)
    assert length.lease_ms() == 3000 + MAX_GROWTH_LEASES * 3000


def test_a_slow_call_is_forgotten_after_the_recent_calls() -> None:
    length = LeaseLength(push_timeout_ms=1000)
    length.record(1500)
    for _ in range(REMEMBERED_CALLS):
        length.record(10)
    assert length.lease_ms() == 3020


def test_a_lease_is_used_only_with_a_request_and_its_settling_left() -> None:
    length = LeaseLength(push_timeout_ms=1000)
    assert length.enough_left(2000)
    assert not length.enough_left(1999)
    assert not length.enough_left(-5)
