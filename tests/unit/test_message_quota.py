"""The message quota's tally: when a project is counted again, what one count lets a process
admit, and how far processes posting for one project at once can pass the limit.

The store here is a number: the messages admitted and not yet consumed, which is what a store
would count once the posts are stored.
"""

from __future__ import annotations

import pytest

from zaqar_delay import errors
from zaqar_delay.clock import FakeClock
from zaqar_delay.message_quota import (
    COUNT_COST_FACTOR,
    RECOUNT_AFTER_MS,
    RECOUNT_AT_MOST_EVERY_MS,
    REMEMBERED_PROJECTS,
    SLACK,
    MessageQuota,
)


class Store:
    """Counts what the quotas admitted (each post stored at once), per project."""

    def __init__(self) -> None:
        self.held: dict[str, int] = {}
        self.counts = 0

    def count(self, project: str, most: int, now_ms: int) -> int:
        self.counts += 1
        self.clock.advance(ms=self.takes_ms)
        return self.held.get(project, 0)

    def quota(self, most: int, clock: FakeClock, takes_ms: int = 0) -> MessageQuota:
        """A quota on this store; each count takes ``takes_ms`` of ``clock``."""
        self.clock, self.takes_ms = clock, takes_ms
        return MessageQuota(most, self.count, clock)

    def post(self, quota: MessageQuota, project: str, messages: int) -> bool:
        try:
            quota.admit(project, messages)
        except errors.QuotaExceeded:
            return False
        self.held[project] = self.held.get(project, 0) + messages
        return True


def test_posts_are_admitted_up_to_the_limit_and_refused_past_it() -> None:
    store, clock = Store(), FakeClock()
    quota = store.quota(1000, clock)
    assert store.post(quota, "p", 1000)  # a fresh count leaves room for the whole post
    with pytest.raises(errors.QuotaExceeded) as refused:
        quota.admit("p", 1)
    assert "holds about 1000 messages of the 1000" in refused.value.description
    assert "max_messages_per_project" in refused.value.description
    assert store.post(quota, "other", 1000), "another project has a tally of its own"


def test_a_post_larger_than_what_is_left_is_refused_whole() -> None:
    store, clock = Store(), FakeClock()
    store.held["p"] = 990
    quota = store.quota(1000, clock)
    assert not store.post(quota, "p", 11)
    assert store.post(quota, "p", 10)
    assert store.held["p"] == 1000


def test_a_project_at_its_limit_is_counted_at_most_once_a_second_however_fast_it_posts() -> None:
    store, clock = Store(), FakeClock()
    quota = store.quota(100, clock)
    assert store.post(quota, "p", 100)
    counted = store.counts
    for _ in range(50):
        assert not store.post(quota, "p", 1)
        clock.advance(ms=10)  # 500 ms in all
    assert store.counts == counted, "refused on the count at hand within the second"
    clock.advance(ms=RECOUNT_AT_MOST_EVERY_MS)
    assert not store.post(quota, "p", 1)
    assert store.counts == counted + 1


def test_messages_consumed_make_room_once_the_project_is_counted_again() -> None:
    store, clock = Store(), FakeClock()
    quota = store.quota(100, clock)
    assert store.post(quota, "p", 100)
    store.held["p"] = 40  # consumed elsewhere
    clock.advance(ms=RECOUNT_AT_MOST_EVERY_MS)
    assert store.post(quota, "p", 60)
    assert not store.post(quota, "p", 1)


def test_an_old_count_is_made_again_before_it_is_relied_on() -> None:
    store, clock = Store(), FakeClock()
    quota = store.quota(1000, clock)
    assert store.post(quota, "p", 1)
    counted = store.counts
    clock.advance(ms=RECOUNT_AFTER_MS - 1)
    assert store.post(quota, "p", 1)
    assert store.counts == counted, "a post within its share needs no count"
    clock.advance(ms=1)
    assert store.post(quota, "p", 1)
    assert store.counts == counted + 1


def test_a_clock_set_back_has_the_project_counted_again() -> None:
    store, clock = Store(), FakeClock()
    quota = store.quota(1000, clock)
    assert store.post(quota, "p", 1)
    counted = store.counts
    clock.advance(ms=-60_000)
    assert store.post(quota, "p", 1)
    assert store.counts == counted + 1


def test_a_project_whose_count_takes_long_is_counted_again_that_much_later() -> None:
    store, clock = Store(), FakeClock()
    quota = store.quota(100, clock, takes_ms=300)
    rest_ms = COUNT_COST_FACTOR * 300
    assert rest_ms > RECOUNT_AFTER_MS
    assert store.post(quota, "p", 100)
    counted = store.counts
    clock.advance(ms=rest_ms - 300 - 1)  # the count began 300 ms before the clock read
    store.held["p"] = 0  # consumed elsewhere
    assert not store.post(quota, "p", 1)
    assert store.counts == counted, "at its limit, not counted within the rest"
    clock.advance(ms=1)
    assert store.post(quota, "p", 1)
    assert store.counts == counted + 1


def test_a_post_past_the_share_waits_for_the_rest_of_a_long_count_too() -> None:
    store, clock = Store(), FakeClock()
    quota = store.quota(1000, clock, takes_ms=300)
    assert store.post(quota, "p", 1)
    counted = store.counts
    # Within the limit, past what one count lets a process admit: not counted, refused.
    assert not store.post(quota, "p", 900)
    assert store.counts == counted
    clock.advance(ms=COUNT_COST_FACTOR * 300)
    assert store.post(quota, "p", 900)
    assert store.counts == counted + 1


def test_a_project_counted_in_milliseconds_is_refused_only_at_its_limit() -> None:
    """Counts of 2 ms rest the project 40 ms; posts 1 ms apart pass the process's share
    within it, and are counted again at once rather than refused."""
    store, clock = Store(), FakeClock()
    quota = store.quota(400, clock, takes_ms=2)
    while store.post(quota, "p", 20):
        clock.advance(ms=1)
    assert store.held["p"] == 400


def test_posts_arriving_while_the_project_is_counted_are_admitted_on_the_tally_at_hand() -> None:
    store, clock = Store(), FakeClock()
    quota = store.quota(1000, clock)
    assert store.post(quota, "p", 1)
    inner: list[bool] = []
    count = store.count

    def count_with_a_post_meanwhile(project: str, most: int, now_ms: int) -> int:
        inner.append(store.post(quota, project, 1))  # another request of the project
        return count(project, most, now_ms)

    quota._count = count_with_a_post_meanwhile
    clock.advance(ms=RECOUNT_AFTER_MS)
    counted = store.counts
    assert store.post(quota, "p", 1)
    assert inner == [True]
    assert store.counts == counted + 1, "one count for both posts"


def test_messages_given_back_make_room_at_once() -> None:
    """A post admitted and then not stored (refused, or repeating dedup ids) leaves room for
    the next without waiting for a count."""
    store, clock = Store(), FakeClock()
    quota = store.quota(10, clock)
    assert store.post(quota, "p", 5)
    unstored = quota.admit("p", 5)
    assert unstored is not None
    assert not store.post(quota, "p", 1), "the limit is reached"
    quota.give_back(unstored, 3)
    assert store.post(quota, "p", 3)
    assert not store.post(quota, "p", 1)
    assert store.counts == 1


def test_a_count_after_the_admission_leaves_nothing_to_give_back() -> None:
    """The count after it did not see the messages not stored: giving them back again would
    let the project past its limit."""
    store, clock = Store(), FakeClock()
    quota = store.quota(10, clock)
    unstored = quota.admit("p", 4)
    assert unstored is not None
    clock.advance(ms=RECOUNT_AFTER_MS)
    assert store.post(quota, "p", 10), "counted again: nothing held"
    counted = store.counts
    quota.give_back(unstored, 4)
    assert not store.post(quota, "p", 1)
    assert store.counts == counted


def test_no_limit_never_counts() -> None:
    store, clock = Store(), FakeClock()
    quota = store.quota(0, clock)
    assert all(store.post(quota, "p", 1000) for _ in range(10))
    assert store.counts == 0


def test_the_tallies_kept_are_bounded() -> None:
    store, clock = Store(), FakeClock()
    quota = store.quota(10, clock)
    for n in range(REMEMBERED_PROJECTS + 5):
        quota.admit(f"p{n}", 1)
    assert len(quota._tallies) == REMEMBERED_PROJECTS
    assert "p0" not in quota._tallies and f"p{REMEMBERED_PROJECTS + 4}" in quota._tallies


@pytest.mark.parametrize("processes", [2, 4, 8])
def test_processes_posting_at_once_pass_the_limit_by_at_most_slack_each(processes: int) -> None:
    """Each process admits on its own tally; all of them post in turns, 10 messages a post,
    while the clock moves 100 ms a round, until every one is refused for two seconds."""
    store, clock = Store(), FakeClock()
    quotas = [store.quota(10_000, clock) for _ in range(processes)]
    refused_since: int | None = None
    while refused_since is None or clock.now_ms() - refused_since < 2000:
        admitted = [store.post(quota, "p", 10) for quota in quotas]
        if any(admitted):
            refused_since = None
        elif refused_since is None:
            refused_since = clock.now_ms()
        clock.advance(ms=100)
    assert 10_000 <= store.held["p"] <= 10_000 + processes * SLACK
