"""The push part of the storage contract, on every store (zaqar_delay.storage.deliveries):
what a post owes each subscription, found across queues in one call, leased, settled, and
due again when a lease runs out."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.stores import STORES, namespace_of, open_test_driver
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import (
    ClaimTimes,
    LeaseRequest,
    MessageEdit,
    NewMessage,
    NewSubscription,
    OverLimit,
    Settlement,
    SubscriptionChange,
)
from zaqar_delay.storage.base import Driver

# Every store, and Swift.
pytestmark = pytest.mark.parametrize("store_uri", [*STORES, "swift"], indirect=True)

P, Q = "project-a", "alerts"
ALICE = "a" * 32
LEASE_MS = 30_000


def subscribe(
    driver: Driver,
    clock: FakeClock,
    name: str = "a",
    queue: str = Q,
    ttl: int = 3600,
    **options: Any,
) -> str:
    sid, _ = driver.create_subscription(
        P, queue, NewSubscription(f"http://127.0.0.1:9/{name}", ttl, options, "s"), clock.now_ms()
    )
    return sid


def post(
    driver: Driver,
    clock: FakeClock,
    *bodies: Any,
    delay_ms: int = 0,
    queue: str = Q,
    dedup: str = "",
) -> list[str]:
    messages = [NewMessage(f'"{b}"', 3600, delay_ms, dedup) for b in bodies]
    return driver.post_messages(P, queue, messages, ALICE, clock.now_ms()).ids


def lease(driver: Driver, clock: FakeClock, queue: str = Q, limit: int = 10) -> list[Any]:
    return driver.lease_pushes(P, queue, LeaseRequest(clock.now_ms(), LEASE_MS, limit))


def test_a_queue_without_subscriptions_owes_nothing(driver: Driver, clock: FakeClock) -> None:
    posted = driver.post_messages(P, Q, [NewMessage('"x"', 3600, 0)], ALICE, clock.now_ms())
    assert posted.push_due_ms == 0
    assert driver.due_push_queues(clock.now_ms(), 10) == []
    assert driver.next_push_ms() is None
    assert lease(driver, clock) == []


def assert_nothing_owed(driver: Driver, clock: FakeClock) -> None:
    """Every push ended. The store may still wake a dispatcher once, when the last lease would
    have ended (never later); that round leases nothing, and then nothing is owed."""
    next_ms = driver.next_push_ms()
    assert next_ms is None or next_ms <= clock.now_ms() + LEASE_MS
    clock.advance(ms=LEASE_MS)
    for project, queue in driver.due_push_queues(clock.now_ms(), 10):
        assert driver.lease_pushes(project, queue, LeaseRequest(clock.now_ms(), LEASE_MS, 10)) == []
    assert driver.next_push_ms() is None


def test_a_push_is_due_with_its_message_never_before(driver: Driver, clock: FakeClock) -> None:
    sid = subscribe(driver, clock)
    posted = driver.post_messages(
        P, Q, [NewMessage('"later"', 3600, 10_000)], ALICE, clock.now_ms()
    )
    due = clock.now_ms() + 10_000
    assert posted.push_due_ms == due
    assert driver.next_push_ms() == due
    clock.advance(ms=9_999)
    assert driver.due_push_queues(clock.now_ms(), 10) == []
    assert lease(driver, clock) == []
    clock.advance(ms=1)
    assert driver.due_push_queues(clock.now_ms(), 10) == [(P, Q)]
    [delivery] = lease(driver, clock)
    assert delivery.id == f"{sid}:{posted.ids[0]}"
    assert (delivery.project, delivery.queue, delivery.attempts) == (P, Q, 0)
    assert delivery.subscription.id == sid and delivery.message.body == "later"
    # Leased: nobody else takes it until the lease ends.
    assert driver.due_push_queues(clock.now_ms(), 10) == []
    assert lease(driver, clock) == []
    assert driver.next_push_ms() == clock.now_ms() + LEASE_MS
    driver.settle_pushes(P, Q, Settlement([(delivery, None)]), clock.now_ms())
    assert_nothing_owed(driver, clock)
    clock.advance(seconds=60)
    assert lease(driver, clock) == []


def test_a_push_waits_for_a_message_rescheduled_later(driver: Driver, clock: FakeClock) -> None:
    subscribe(driver, clock)
    [moved] = post(driver, clock, "moved", delay_ms=10_000)
    start = clock.now_ms()
    driver.edit_message(P, Q, MessageEdit(moved, None, due_ms=start + 60_000), start)
    clock.advance(ms=10_000)
    # Owed at the old due time, but its message is not due: not leased, owed again later.
    assert lease(driver, clock) == []
    assert driver.next_push_ms() == start + 60_000
    clock.advance(ms=49_999)
    assert (
        driver.lease_pushes(P, Q, LeaseRequest(clock.now_ms(), LEASE_MS, 10, start + 59_999)) == []
    )
    clock.advance(ms=1)
    [delivery] = lease(driver, clock)
    assert delivery.message.id == moved and delivery.owed_ms == start + 60_000


def test_pushes_come_forward_with_their_message_rescheduled_earlier(
    driver: Driver, clock: FakeClock
) -> None:
    first, second = subscribe(driver, clock, "a"), subscribe(driver, clock, "b")
    moved, kept = post(driver, clock, "moved", "kept", delay_ms=60_000)
    start = clock.now_ms()
    assert driver.edit_message(P, Q, MessageEdit(moved, None, due_ms=start + 5_000), start) == (
        start + 5_000
    )
    assert driver.next_push_ms() == start + 5_000
    clock.advance(ms=4_999)
    assert driver.due_push_queues(clock.now_ms(), 10) == []
    assert lease(driver, clock) == []
    clock.advance(ms=1)
    assert driver.due_push_queues(clock.now_ms(), 10) == [(P, Q)]
    leased = lease(driver, clock)
    assert sorted(d.id for d in leased) == sorted(f"{s}:{moved}" for s in (first, second))
    assert {(d.owed_ms, d.attempts) for d in leased} == {(start + 5_000, 0)}
    driver.settle_pushes(P, Q, Settlement([(d, None) for d in leased]), clock.now_ms())
    # The other message's pushes keep their time.
    clock.advance(ms=54_999)
    assert lease(driver, clock) == []
    clock.advance(ms=1)
    assert sorted(d.id for d in lease(driver, clock)) == sorted(
        f"{s}:{kept}" for s in (first, second)
    )


def test_only_an_earlier_due_time_brings_pushes_forward(driver: Driver, clock: FakeClock) -> None:
    subscribe(driver, clock)
    [mid] = post(driver, clock, "x", delay_ms=10_000)
    start = clock.now_ms()
    for edit in (
        MessageEdit(mid, None, body_json='"y"'),
        MessageEdit(mid, None, due_ms=start + 10_000),
        MessageEdit(mid, None, due_ms=start + 20_000),
    ):
        assert driver.edit_message(P, Q, edit, start) == 0
    assert driver.next_push_ms() == start + 10_000


def test_a_push_in_flight_stays_and_a_retry_comes_forward(driver: Driver, clock: FakeClock) -> None:
    subscribe(driver, clock)
    [mid] = post(driver, clock, "x")
    start = clock.now_ms()

    def reschedule(*due_ms: int) -> int:
        return [
            driver.edit_message(P, Q, MessageEdit(mid, None, due_ms=at), clock.now_ms())
            for at in due_ms
        ][-1]

    [held] = lease(driver, clock)  # owed again at its lease's end, start + LEASE_MS
    assert reschedule(start + 60_000, start + 1_000) == 0
    clock.advance(ms=1_000)
    assert lease(driver, clock) == []
    # Retried: owed again later, then brought forward with one attempt made.
    driver.settle_pushes(P, Q, Settlement([(held, start + 20_000)]), clock.now_ms())
    assert reschedule(start + 60_000, start + 2_000) == start + 2_000
    clock.advance(ms=1_000)
    [again] = lease(driver, clock)
    assert (again.id, again.attempts, again.owed_ms) == (held.id, 1, start + 2_000)


def test_pushes_owed_soon_are_leased_ahead_with_their_time(
    driver: Driver, clock: FakeClock
) -> None:
    subscribe(driver, clock)
    [soon] = post(driver, clock, "soon", delay_ms=100)
    post(driver, clock, "later", delay_ms=500)
    now = clock.now_ms()
    assert driver.lease_pushes(P, Q, LeaseRequest(now, LEASE_MS, 10, now + 99)) == []
    assert driver.due_push_queues(now + 100, 10) == [(P, Q)]
    [ahead] = driver.lease_pushes(P, Q, LeaseRequest(now, LEASE_MS, 10, now + 200))
    assert ahead.message.id == soon and ahead.owed_ms == now + 100 and ahead.attempts == 0
    # Held for the lease time past the time leased up to; the later push is next.
    assert driver.next_push_ms() == now + 500
    clock.advance(ms=500)
    [later] = lease(driver, clock)
    assert later.message.body == "later" and later.owed_ms == now + 500
    clock.advance(ms=200 - 500 + LEASE_MS - 1)
    assert lease(driver, clock) == []
    clock.advance(ms=1)
    [again] = lease(driver, clock)
    assert again.id == ahead.id and again.owed_ms == now + 200 + LEASE_MS


def test_a_push_leased_ahead_is_sent_no_sooner_than_its_message_is_due(
    driver: Driver, clock: FakeClock
) -> None:
    subscribe(driver, clock)
    [mid] = post(driver, clock, "x")
    now = clock.now_ms()
    # Rescheduled a little later: the push is still owed at the old time, which has come.
    driver.edit_message(P, Q, MessageEdit(mid, None, due_ms=now + 30), now)
    [ahead] = driver.lease_pushes(P, Q, LeaseRequest(now, LEASE_MS, 10, now + 50))
    assert ahead.message.id == mid and ahead.owed_ms == now + 30


def test_one_call_settles_the_attempts_of_several_leases(driver: Driver, clock: FakeClock) -> None:
    subscribe(driver, clock)
    post(driver, clock, 1, 2)
    [first] = lease(driver, clock, limit=1)
    [second] = lease(driver, clock, limit=1)
    assert first.lease != second.lease
    driver.settle_pushes(P, Q, Settlement([(first, None), (second, None)]), clock.now_ms())
    assert_nothing_owed(driver, clock)


def test_one_call_settles_many_attempts(driver: Driver, clock: FakeClock) -> None:
    subscribe(driver, clock)
    post(driver, clock, 1, 2, 3)
    delivered, retried, failed = lease(driver, clock)
    retry_at = clock.now_ms() + 1_000
    driver.settle_pushes(
        P, Q, Settlement([(delivered, None), (retried, retry_at), (failed, None)]), clock.now_ms()
    )
    clock.advance(ms=1_000)
    [again] = lease(driver, clock)
    assert again.id == retried.id and again.attempts == 1 and again.owed_ms == retry_at


def test_each_subscription_is_owed_each_message(driver: Driver, clock: FakeClock) -> None:
    first, second = subscribe(driver, clock, "a"), subscribe(driver, clock, "b")
    ids = post(driver, clock, 1, 2)
    leased = lease(driver, clock)
    assert {d.id for d in leased} == {f"{s}:{m}" for s in (first, second) for m in ids}


def test_a_retry_is_due_at_its_time_with_one_attempt_more(driver: Driver, clock: FakeClock) -> None:
    subscribe(driver, clock)
    post(driver, clock, "x")
    [delivery] = lease(driver, clock)
    retry_at = clock.now_ms() + 5_000
    driver.settle_pushes(P, Q, Settlement([(delivery, retry_at)]), clock.now_ms())
    assert driver.next_push_ms() == retry_at
    clock.advance(ms=4_999)
    assert lease(driver, clock) == []
    clock.advance(ms=1)
    [again] = lease(driver, clock)
    assert again.id == delivery.id and again.attempts == 1 and again.lease != delivery.lease


def test_a_push_given_back_unsent_is_owed_again_at_its_time_with_no_attempt_more(
    driver: Driver, clock: FakeClock
) -> None:
    """What a stopping dispatcher does with a push leased ahead: the push is owed again at
    its time, to any dispatcher, at once (not when the lease ends), and frees its place."""
    subscribe(driver, clock, _max_concurrent_dispatches=1)
    post(driver, clock, "x")
    [failed] = lease(driver, clock)
    retry_at = clock.now_ms() + 5_000
    driver.settle_pushes(P, Q, Settlement([(failed, retry_at)]), clock.now_ms())
    now = clock.now_ms()
    [ahead] = driver.lease_pushes(P, Q, LeaseRequest(now, LEASE_MS, 10, retry_at))
    assert (ahead.attempts, ahead.owed_ms) == (1, retry_at)
    assert driver.next_push_ms() != retry_at  # held by the lease
    driver.settle_pushes(P, Q, Settlement([(ahead, retry_at)], unsent=[ahead.id]), now)
    assert driver.next_push_ms() == retry_at
    [again] = driver.lease_pushes(P, Q, LeaseRequest(now, LEASE_MS, 10, retry_at))
    assert (again.id, again.attempts, again.owed_ms) == (ahead.id, 1, retry_at)
    assert again.lease != ahead.lease


def test_a_lease_that_runs_out_is_due_again_and_its_settle_is_ignored(
    driver: Driver, clock: FakeClock
) -> None:
    subscribe(driver, clock)
    post(driver, clock, "x")
    [first] = lease(driver, clock)  # this dispatcher dies
    clock.advance(ms=LEASE_MS)
    assert driver.due_push_queues(clock.now_ms(), 10) == [(P, Q)]
    [second] = lease(driver, clock)
    assert second.id == first.id and second.attempts == 0
    driver.settle_pushes(P, Q, Settlement([(first, None)]), clock.now_ms())  # late: ignored
    assert driver.next_push_ms() == clock.now_ms() + LEASE_MS
    driver.settle_pushes(P, Q, Settlement([(second, None)]), clock.now_ms())
    assert_nothing_owed(driver, clock)


def test_pushes_of_gone_messages_and_subscriptions_are_dropped(
    driver: Driver, clock: FakeClock
) -> None:
    kept, dropped = subscribe(driver, clock, "a"), subscribe(driver, clock, "b")
    deleted, alive = post(driver, clock, "deleted", "alive")
    driver.delete_message(P, Q, deleted, None, clock.now_ms())
    driver.delete_subscription(P, Q, dropped)
    assert [d.id for d in lease(driver, clock)] == [f"{kept}:{alive}"]


def test_pushes_of_gone_messages_do_not_use_up_a_lease(driver: Driver, clock: FakeClock) -> None:
    subscribe(driver, clock)
    first, second, _ = post(driver, clock, 1, 2, 3)
    for gone in (first, second):
        driver.delete_message(P, Q, gone, None, clock.now_ms())
    assert [d.message.body for d in lease(driver, clock, limit=1)] == ["3"]
    assert lease(driver, clock) == []


def test_only_stored_messages_and_live_subscriptions_are_owed(
    driver: Driver, clock: FakeClock
) -> None:
    subscribe(driver, clock, "short", ttl=60)
    clock.advance(seconds=61)
    live = subscribe(driver, clock, "live")
    [first] = post(driver, clock, "x", dedup="d1")
    post(driver, clock, "x", dedup="d1")  # a duplicate: nothing new owed
    assert [d.id for d in lease(driver, clock)] == [f"{live}:{first}"]


def test_due_queues_are_found_across_queues_in_due_order(driver: Driver, clock: FakeClock) -> None:
    for queue, delay in (("q1", 3_000), ("q2", 1_000), ("q3", 60_000)):
        subscribe(driver, clock, queue=queue)
        post(driver, clock, "x", delay_ms=delay, queue=queue)
    clock.advance(seconds=5)
    assert driver.due_push_queues(clock.now_ms(), 10) == [(P, "q2"), (P, "q1")]
    assert driver.due_push_queues(clock.now_ms(), 1) == [(P, "q2")]


def test_deleting_the_queue_drops_its_pushes(driver: Driver, clock: FakeClock) -> None:
    subscribe(driver, clock)
    post(driver, clock, "x")
    driver.delete_queue(P, Q)
    assert driver.due_push_queues(clock.now_ms(), 10) == []
    assert driver.next_push_ms() is None


def test_two_dispatchers_never_lease_one_push(
    driver: Driver, clock: FakeClock, store_uri: str
) -> None:
    other = open_test_driver(store_uri, namespace=namespace_of(driver))
    try:
        subscribe(driver, clock)
        post(driver, clock, *range(6))
        mine = driver.lease_pushes(P, Q, LeaseRequest(clock.now_ms(), LEASE_MS, 3))
        theirs = other.lease_pushes(P, Q, LeaseRequest(clock.now_ms(), LEASE_MS, 10))
        assert len(mine) == 3 and len(theirs) == 3
        assert not {d.id for d in mine} & {d.id for d in theirs}
    finally:
        other.close()


def test_consumed_messages_are_deleted_once_no_push_is_owed(
    driver: Driver, clock: FakeClock
) -> None:
    subscribe(driver, clock, "a")
    subscribe(driver, clock, "b")
    [mid] = post(driver, clock, "x")
    first, second = lease(driver, clock)
    assert driver.settle_pushes(P, Q, Settlement([(first, None)], [first.id]), clock.now_ms()) == []
    assert driver.get_messages(P, Q, [mid], clock.now_ms())  # the other is still owed it
    consumed = driver.settle_pushes(P, Q, Settlement([(second, None)], [second.id]), clock.now_ms())
    assert consumed == [mid]
    assert driver.get_messages(P, Q, [mid], clock.now_ms()) == []


def test_a_deleted_subscription_keeps_no_consumed_message(driver: Driver, clock: FakeClock) -> None:
    subscribe(driver, clock, "a")
    gone = subscribe(driver, clock, "b")
    [mid] = post(driver, clock, "x")
    leased = {d.subscription.id: d for d in lease(driver, clock)}
    driver.delete_subscription(P, Q, gone)
    [kept] = [d for sid, d in leased.items() if sid != gone]
    consumed = driver.settle_pushes(P, Q, Settlement([(kept, None)], [kept.id]), clock.now_ms())
    assert consumed == [mid]
    assert driver.get_messages(P, Q, [mid], clock.now_ms()) == []


class TestDispatchLimits:
    """A subscription's ``_max_concurrent_dispatches`` and ``_max_dispatches_per_second`` hold
    across every dispatcher on the store (here: two leases of one store and of a second
    connection to it), without holding back the other subscriptions."""

    def test_no_more_requests_in_flight_than_the_limit(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        subscribe(driver, clock, _max_concurrent_dispatches=2)
        post(driver, clock, 1, 2, 3, 4)
        first = lease(driver, clock)
        assert [d.message.body for d in first] == ["1", "2"]
        # Parked, not owed: no dispatcher is woken for them.
        assert lease(driver, clock) == []
        assert_nothing_due(driver, clock)
        # A request that ends frees its place for the next push, owed as before.
        driver.settle_pushes(P, Q, Settlement([(first[0], None)]), clock.now_ms())
        assert driver.due_push_queues(clock.now_ms(), 10) == [(P, Q)]
        [third] = lease(driver, clock)
        assert third.message.body == "3" and third.owed_ms == first[0].owed_ms
        # So does a retry, and a lease that runs out (its dispatcher died).
        driver.settle_pushes(P, Q, Settlement([(first[1], clock.now_ms() + 1_000)]), clock.now_ms())
        [fourth] = lease(driver, clock)
        assert fourth.message.body == "4"
        assert lease(driver, clock) == []
        clock.advance(ms=LEASE_MS)
        again = lease(driver, clock)
        assert sorted(d.message.body for d in again) == ["2", "3"]

    def test_a_lease_that_runs_out_frees_its_place_even_when_its_message_is_gone(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        subscribe(driver, clock, _max_concurrent_dispatches=1)
        first_id, _ = post(driver, clock, 1, 2)
        [first] = lease(driver, clock)  # its dispatcher dies
        assert first.message.id == first_id
        driver.delete_message(P, Q, first_id, None, clock.now_ms())
        clock.advance(ms=LEASE_MS)
        leased = lease(driver, clock) or lease(driver, clock)
        assert [d.message.body for d in leased] == ["2"]

    def test_a_subscription_at_its_limit_does_not_hold_back_the_others(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        # The limited subscription's pushes come first in due order.
        limited = subscribe(driver, clock, "limited", _max_concurrent_dispatches=1)
        post(driver, clock, *range(30))
        clock.advance(ms=1)
        free = subscribe(driver, clock, "free")
        post(driver, clock, *range(30, 39))
        leased = lease(driver, clock, limit=10)
        by_subscription = [d.subscription.id for d in leased]
        assert by_subscription.count(limited) == 1
        assert by_subscription.count(free) == 9

    def test_pushes_are_spaced_by_the_rate(self, driver: Driver, clock: FakeClock) -> None:
        subscribe(driver, clock, _max_dispatches_per_second=4)
        post(driver, clock, 1, 2, 3)
        start = clock.now_ms()
        [first] = lease(driver, clock)
        assert first.owed_ms == start
        # The next two are owed again at the times the rate reserves for them.
        assert lease(driver, clock) == []
        assert driver.next_push_ms() == start + 250
        clock.advance(ms=249)
        assert lease(driver, clock) == []
        clock.advance(ms=1)
        [second] = lease(driver, clock)
        assert second.message.body == "2" and second.owed_ms == start + 250
        # Leased ahead, a push is handed over with the time the rate gives it.
        [third] = driver.lease_pushes(P, Q, LeaseRequest(clock.now_ms(), LEASE_MS, 10, start + 500))
        assert third.message.body == "3" and third.owed_ms == start + 500

    def test_a_backlog_is_spaced_by_the_rate_from_when_it_is_sent(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        subscribe(driver, clock, _max_dispatches_per_second=4)
        post(driver, clock, 1, 2, 3)
        # Owed ten seconds ago (no dispatcher ran): sent from now on, a rate interval apart.
        clock.advance(seconds=10)
        now = clock.now_ms()
        [first] = lease(driver, clock)
        assert first.message.body == "1" and first.owed_ms <= now
        assert driver.next_push_ms() == now + 250
        clock.advance(ms=249)
        assert lease(driver, clock) == []
        clock.advance(ms=1)
        [second] = lease(driver, clock)
        assert second.message.body == "2" and second.owed_ms == now + 250

    def test_times_the_rate_reserved_before_the_dispatchers_stopped_are_not_sent_at_once(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        subscribe(driver, clock, _max_dispatches_per_second=4)
        post(driver, clock, 1, 2, 3, 4)
        start = clock.now_ms()
        assert [d.message.body for d in lease(driver, clock)] == ["1"]
        # Reserved for 2, 3 and 4: start + 250, 500 and 750.
        assert driver.next_push_ms() == start + 250
        # No dispatcher runs for ten seconds: every time reserved has passed.
        clock.advance(seconds=10)
        now = clock.now_ms()
        assert driver.next_push_ms() == start + 250 < now
        [second] = lease(driver, clock)
        assert second.message.body == "2" and second.owed_ms == now
        # The others keep their order, an interval apart from now.
        assert driver.next_push_ms() == now + 250
        clock.advance(ms=249)
        assert lease(driver, clock) == []
        clock.advance(ms=1)
        [third] = lease(driver, clock)
        assert third.message.body == "3" and third.owed_ms == now + 250
        # A push posted now takes the rate's next slot, after those reserved before.
        post(driver, clock, 5)
        clock.advance(ms=250)
        [fourth] = lease(driver, clock)
        assert fourth.message.body == "4" and fourth.owed_ms == now + 500
        clock.advance(ms=250)
        [fifth] = lease(driver, clock)
        assert fifth.message.body == "5" and fifth.owed_ms == now + 750

    def test_changing_the_limits_frees_what_they_held_back(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        sid = subscribe(driver, clock, _max_concurrent_dispatches=1)
        post(driver, clock, 1, 2, 3)
        assert len(lease(driver, clock)) == 1
        driver.update_subscription(P, Q, SubscriptionChange(sid, options={}), clock.now_ms())
        assert driver.due_push_queues(clock.now_ms(), 10) == [(P, Q)]
        assert sorted(d.message.body for d in lease(driver, clock)) == ["2", "3"]

    def test_a_deleted_subscription_leaves_nothing_parked(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        sid = subscribe(driver, clock, _max_concurrent_dispatches=1)
        post(driver, clock, 1, 2, 3)
        [held] = lease(driver, clock)
        driver.delete_subscription(P, Q, sid)
        driver.settle_pushes(P, Q, Settlement([(held, None)]), clock.now_ms())
        assert_nothing_owed(driver, clock)


def assert_nothing_due(driver: Driver, clock: FakeClock) -> None:
    """No dispatcher is owed a push before the leases it holds run out."""
    next_ms = driver.next_push_ms()
    assert next_ms is None or next_ms >= clock.now_ms() + LEASE_MS - 1


def test_messages_moved_to_a_dead_letter_queue_are_owed_to_its_subscriptions(
    driver: Driver, clock: FakeClock
) -> None:
    """As a post owes them (``Driver.receive_dead_letters``): a subscription of a dead-letter
    queue hears of each dead letter, moved by a claim or copied from another store."""
    now = clock.now_ms()
    driver.create_queue(P, Q, {"_max_claim_count": 1, "_dead_letter_queue": "dead"}, now)
    driver.create_queue(P, "dead", {}, now)
    subscribe(driver, clock, queue="dead")
    [mid] = post(driver, clock, "poison")
    held = driver.create_claim(P, Q, ClaimTimes(60, 60), 10, now)
    assert held is not None
    driver.release_claim(P, Q, held.id, now)
    over = driver.claim(P, Q, ClaimTimes(60, 60), 10, now).over_limit
    assert over is not None and over.ids == (mid,)
    driver.move_dead_letters(P, Q, over, now)
    assert [d.message.id for d in lease(driver, clock, queue="dead")] == [mid]

    [other] = post(driver, clock, "from another store", queue="elsewhere")
    [message] = driver.get_messages(P, "elsewhere", [other], now)
    # As from another store (where a store keys messages by id alone, one id is one message).
    driver.delete_message(P, "elsewhere", other, None, now)
    driver.receive_dead_letters(P, OverLimit("dead", None, (message,)), now)
    assert [d.message.id for d in lease(driver, clock, queue="dead")] == [other]
