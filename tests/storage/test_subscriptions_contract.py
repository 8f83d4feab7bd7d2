"""The subscription part of the storage contract, on every store (zaqar_delay.storage.
subscriptions): unique by subscriber, live until their ttl, listed in id order, gone with
their queue."""

from __future__ import annotations

import threading

import pytest

from tests.helpers.pooled import CONTRACT_STORES, one_store
from tests.helpers.stores import namespace_of, open_test_driver
from zaqar_delay import errors
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import NewSubscription, PushResult, SubscriptionChange
from zaqar_delay.storage.base import Driver

# Every store, pooled (each queue on a redis-server or a MongoDB pool), and Swift.
pytestmark = pytest.mark.parametrize("store_uri", [*CONTRACT_STORES, "swift"], indirect=True)

P, Q = "project-a", "alerts"
HOOK = "http://127.0.0.1:9/hook"


def subscribe(
    driver: Driver, clock: FakeClock, subscriber: str = HOOK, ttl: int = 3600, queue: str = Q
) -> tuple[str, bool]:
    return driver.create_subscription(
        P,
        queue,
        NewSubscription(subscriber, ttl, {"k": [1, "x"]}, "secret-" + subscriber),
        clock.now_ms(),
    )


def test_create_get_and_the_queue_it_creates(driver: Driver, clock: FakeClock) -> None:
    sid, created = subscribe(driver, clock)
    assert created
    assert driver.get_metadata(P, Q) == {}  # the queue was created, as Zaqar does
    assert [q.name for q in driver.list_queues(P, None, 10, False)] == [Q]
    clock.advance(seconds=5)
    found = driver.get_subscription(P, Q, sid, clock.now_ms())
    assert found is not None
    assert (found.id, found.queue, found.subscriber, found.ttl_s) == (sid, Q, HOOK, 3600)
    assert found.options == {"k": [1, "x"]}
    assert found.age_s(clock.now_ms()) == 5
    assert not found.confirmed
    assert found.secret == "secret-" + HOOK
    assert driver.get_subscription(P, Q, "missing", clock.now_ms()) is None


def test_a_subscriber_has_one_subscription_per_queue(driver: Driver, clock: FakeClock) -> None:
    sid, _ = subscribe(driver, clock)
    assert subscribe(driver, clock, ttl=60) == (sid, False)
    other, created = subscribe(driver, clock, queue="other")
    assert created and other != sid
    assert driver.get_subscription(P, Q, sid, clock.now_ms()).ttl_s == 3600  # type: ignore[union-attr]


def test_expiry_hides_it_and_frees_its_subscriber(driver: Driver, clock: FakeClock) -> None:
    sid, _ = subscribe(driver, clock, ttl=60)
    clock.advance(seconds=59)
    assert driver.get_subscription(P, Q, sid, clock.now_ms()) is not None
    clock.advance(seconds=1)
    now = clock.now_ms()
    assert driver.get_subscription(P, Q, sid, now) is None
    assert driver.list_subscriptions(P, Q, None, 10, now) == []
    with pytest.raises(errors.SubscriptionDoesNotExist):
        driver.confirm_subscription(P, Q, sid, True, now)
    again, created = subscribe(driver, clock)
    assert created and again != sid


def test_list_in_id_order_with_a_marker(driver: Driver, clock: FakeClock) -> None:
    ids = sorted(subscribe(driver, clock, f"http://127.0.0.1:9/{i}")[0] for i in range(5))
    now = clock.now_ms()
    first = driver.list_subscriptions(P, Q, None, 3, now)
    assert [s.id for s in first] == ids[:3]
    rest = driver.list_subscriptions(P, Q, first[-1].id, 3, now)
    assert [s.id for s in rest] == ids[3:]
    assert driver.list_subscriptions(P, Q, ids[-1], 3, now) == []
    assert driver.list_subscriptions(P, "nothing-here", None, 3, now) == []


def test_listing_skips_expired_ones(driver: Driver, clock: FakeClock) -> None:
    short = [subscribe(driver, clock, f"http://127.0.0.1:9/s{i}", ttl=60)[0] for i in range(4)]
    kept, _ = subscribe(driver, clock, "http://127.0.0.1:9/kept", ttl=600)
    clock.advance(seconds=61)
    assert [s.id for s in driver.list_subscriptions(P, Q, None, 2, clock.now_ms())] == [kept]
    assert kept not in short


def test_update_replaces_only_what_it_names(driver: Driver, clock: FakeClock) -> None:
    sid, _ = subscribe(driver, clock, ttl=60)
    clock.advance(seconds=30)
    driver.update_subscription(P, Q, SubscriptionChange(sid, ttl_s=120), clock.now_ms())
    clock.advance(seconds=100)  # past the first ttl, inside the new one
    found = driver.get_subscription(P, Q, sid, clock.now_ms())
    assert found is not None and found.ttl_s == 120 and found.age_s(clock.now_ms()) == 100
    assert found.subscriber == HOOK and found.options == {"k": [1, "x"]}
    change = SubscriptionChange(sid, subscriber="mailto:ops@example.com", options={"a": 1})
    driver.update_subscription(P, Q, change, clock.now_ms())
    found = driver.get_subscription(P, Q, sid, clock.now_ms())
    assert found is not None
    assert (found.subscriber, found.options, found.ttl_s) == (
        "mailto:ops@example.com",
        {"a": 1},
        120,
    )


def test_update_to_a_taken_subscriber_conflicts(driver: Driver, clock: FakeClock) -> None:
    first, _ = subscribe(driver, clock, "http://127.0.0.1:9/a")
    second, _ = subscribe(driver, clock, "http://127.0.0.1:9/b")
    with pytest.raises(errors.Conflict):
        driver.update_subscription(
            P, Q, SubscriptionChange(second, subscriber="http://127.0.0.1:9/a"), clock.now_ms()
        )
    assert driver.get_subscription(P, Q, second, clock.now_ms()).subscriber.endswith("/b")  # type: ignore[union-attr]
    # Its own subscriber is no conflict.
    driver.update_subscription(
        P, Q, SubscriptionChange(first, subscriber="http://127.0.0.1:9/a"), clock.now_ms()
    )
    with pytest.raises(errors.SubscriptionDoesNotExist):
        driver.update_subscription(P, Q, SubscriptionChange("missing", ttl_s=60), clock.now_ms())


def test_confirm_and_unconfirm(driver: Driver, clock: FakeClock) -> None:
    sid, _ = subscribe(driver, clock)
    driver.confirm_subscription(P, Q, sid, True, clock.now_ms())
    assert driver.get_subscription(P, Q, sid, clock.now_ms()).confirmed  # type: ignore[union-attr]
    driver.confirm_subscription(P, Q, sid, False, clock.now_ms())
    assert not driver.get_subscription(P, Q, sid, clock.now_ms()).confirmed  # type: ignore[union-attr]


def test_delete_purge_and_queue_delete(driver: Driver, clock: FakeClock) -> None:
    sid, _ = subscribe(driver, clock)
    driver.delete_subscription(P, Q, sid)
    driver.delete_subscription(P, Q, sid)  # again: no error
    assert driver.get_subscription(P, Q, sid, clock.now_ms()) is None
    kept, _ = subscribe(driver, clock)
    driver.purge(P, Q)  # messages only
    assert driver.get_subscription(P, Q, kept, clock.now_ms()) is not None
    driver.purge_subscriptions(P, Q)
    assert driver.list_subscriptions(P, Q, None, 10, clock.now_ms()) == []
    assert driver.get_metadata(P, Q) == {}  # the queue stays
    gone, _ = subscribe(driver, clock)
    driver.delete_queue(P, Q)
    assert driver.get_subscription(P, Q, gone, clock.now_ms()) is None


def test_projects_do_not_see_each_other_s(driver: Driver, clock: FakeClock) -> None:
    sid, _ = subscribe(driver, clock)
    now = clock.now_ms()
    assert driver.get_subscription("project-b", Q, sid, now) is None
    assert driver.list_subscriptions("project-b", Q, None, 10, now) == []
    with pytest.raises(errors.SubscriptionDoesNotExist):
        driver.confirm_subscription("project-b", Q, sid, True, now)
    driver.delete_subscription("project-b", Q, sid)
    assert driver.get_subscription(P, Q, sid, now) is not None


@pytest.mark.racing
def test_concurrent_creations_of_one_subscriber_make_one(
    driver: Driver, clock: FakeClock, store_uri: str
) -> None:
    one_store(store_uri)
    namespace = namespace_of(driver)
    results: list[tuple[str, bool]] = []
    lock = threading.Lock()

    def create() -> None:
        own = open_test_driver(store_uri, namespace=namespace, racing=True)
        try:
            result = own.create_subscription(
                P, Q, NewSubscription(HOOK, 600, {}, "s"), clock.now_ms()
            )
            with lock:
                results.append(result)
        finally:
            own.close()  # not close_test_driver: that drops the shared namespace

    threads = [threading.Thread(target=create) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(results) == 6
    assert sum(created for _, created in results) == 1
    assert len({sid for sid, _ in results}) == 1
    assert len(driver.list_subscriptions(P, Q, None, 10, clock.now_ms())) == 1


def test_the_last_push_result_is_kept_and_survives_updates(
    driver: Driver, clock: FakeClock
) -> None:
    sid, _ = subscribe(driver, clock)
    other, _ = subscribe(driver, clock, subscriber="http://127.0.0.1:9/other")
    found = driver.get_subscription(P, Q, sid, clock.now_ms())
    assert found is not None and found.last_delivery is None
    failed = PushResult(clock.now_ms(), "retry", "HTTP 503")
    driver.record_push_results(P, Q, [(sid, failed), ("gone", failed)])  # unknown: skipped
    found = driver.get_subscription(P, Q, sid, clock.now_ms())
    assert found is not None and found.last_delivery == failed
    later = PushResult(clock.now_ms() + 1000, "delivered", "")
    driver.record_push_results(P, Q, [(sid, later), (other, failed)])
    driver.update_subscription(P, Q, SubscriptionChange(sid, ttl_s=60), clock.now_ms())
    driver.confirm_subscription(P, Q, sid, True, clock.now_ms())
    listed = {
        s.id: s.last_delivery for s in driver.list_subscriptions(P, Q, None, 10, clock.now_ms())
    }
    assert listed == {sid: later, other: failed}
    assert driver.get_subscription(P, "elsewhere", sid, clock.now_ms()) is None
