"""Stores used together: the pooled run of the storage contract spreads its queues over both
pools, and a queue's dead-letter queue may live on another store."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.processes import free_port
from tests.helpers.pooled import pooled_driver
from tests.helpers.stores import close_test_driver, open_test_driver, store_url
from zaqar_delay import errors
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import ClaimOutcome, ClaimTimes, ListQuery, NewMessage, OverLimit
from zaqar_delay.storage import dead_letters
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.catalog import FlavorRecord, PoolRecord
from zaqar_delay.stores import STICKY_MARGIN_S, PooledStores

P = "project-a"
ALICE = "a" * 32
BOB = "b" * 32


def test_the_pooled_run_spreads_queues_over_both_pools(request: pytest.FixtureRequest) -> None:
    for pooled in pooled_driver(request):  # closed when the loop ends
        queues = [f"q{i}" for i in range(40)]
        for queue in queues:
            pooled.create_queue(P, queue, {}, 0)
        # Both pools take queues (equal weights: all 40 on one would be a 1 in 5e11 chance),
        # and each queue's metadata is on its pool's store, not the catalog's.
        assert pooled.pools_used(P, queues) == {"redis", "mongo"}
        assert pooled.stores.default.get_metadata(P, queues[0]) is None
        assert all(pooled.get_metadata(P, queue) == {} for queue in queues)


# Dead-letter queues on another store: (the queue's store, the dead-letter queue's store).
STORE_PAIRS = [("redis-server", "mongodb"), ("mongodb", "redis-server"), ("embedded", "mongodb")]
POISON = {"_max_claim_count": 1, "_dead_letter_queue": "dead"}


@pytest.fixture(params=STORE_PAIRS, ids="->".join)
def two_stores(request: pytest.FixtureRequest) -> Iterator[tuple[Driver, Driver]]:
    source = open_test_driver(store_url(request, request.param[0]))
    target = open_test_driver(store_url(request, request.param[1]))
    yield source, target
    close_test_driver(source)
    close_test_driver(target)


def claim(driver: Driver, clock: FakeClock) -> ClaimOutcome:
    return driver.claim(P, "q", ClaimTimes(30, 30), 5, clock.now_ms())


def poisoned(source: Driver, clock: FakeClock, metadata: dict[str, Any]) -> str:
    """A message of queue "q" claimed once already (its ``_max_claim_count``), claim lapsed."""
    source.create_queue(P, "q", metadata, clock.now_ms())
    message = NewMessage('{"n": 1}', 3600, 0)
    [mid] = source.post_messages(P, "q", [message], ALICE, clock.now_ms()).ids
    first = claim(source, clock)
    assert first.claim is not None and [m.id for m in first.claim.messages] == [mid]
    clock.advance(seconds=31)  # the claim lapses
    return mid


def test_a_message_claimed_too_often_moves_to_a_dead_letter_queue_on_another_store(
    two_stores: tuple[Driver, Driver], clock: FakeClock
) -> None:
    source, target = two_stores
    mid = poisoned(source, clock, {**POISON, "_dead_letter_queue_messages_ttl": 600})
    outcome = claim(source, clock)
    assert outcome.claim is None and outcome.over_limit is not None
    assert (outcome.over_limit.queue, outcome.over_limit.ids) == ("dead", (mid,))
    dead_letters.move(source, P, "q", outcome.over_limit, target, clock.now_ms())
    now = clock.now_ms()
    assert source.get_messages(P, "q", [mid], now) == []
    assert source.get_metadata(P, "dead") is None  # nothing of it on the queue's store
    [moved] = target.get_messages(P, "dead", [mid], now)
    assert (moved.body, moved.client_id, moved.claim_count) == ({"n": 1}, ALICE, 0)
    assert (moved.ttl_s, moved.due_ms, moved.expires_ms) == (600, now, now + 600_000)
    # It is claimable there at once, by its id.
    taken = target.claim(P, "dead", ClaimTimes(30, 30), 5, now)
    assert taken.claim is not None and [m.id for m in taken.claim.messages] == [mid]


def test_a_failed_copy_keeps_the_message_and_a_repeated_copy_stores_it_once(
    two_stores: tuple[Driver, Driver], clock: FakeClock
) -> None:
    source, target = two_stores
    mid = poisoned(source, clock, POISON)

    outcome = claim(source, clock)
    assert outcome.over_limit is not None
    # The dead-letter queue's store is down: a Redis store on a port nothing listens on.
    target_down = open_test_driver(f"redis://127.0.0.1:{free_port()}")
    try:
        with pytest.raises(errors.StorageUnavailable):
            dead_letters.move(source, P, "q", outcome.over_limit, target_down, clock.now_ms())
    finally:
        target_down.close()
    # The fault happened: nothing reached the dead-letter queue; the message is still here.
    assert target.get_messages(P, "dead", [mid], clock.now_ms()) == []
    [kept] = source.get_messages(P, "q", [mid], clock.now_ms())
    # A copy made before a crash that came before the delete: the move repeats, and the
    # dead-letter queue still holds the message once.
    target.receive_dead_letters(P, OverLimit("dead", None, (kept,)), clock.now_ms())
    clock.advance(seconds=61)  # any claim the failed attempt left has lapsed
    outcome = claim(source, clock)
    assert outcome.over_limit is not None and outcome.over_limit.ids == (mid,)
    dead_letters.move(source, P, "q", outcome.over_limit, target, clock.now_ms())
    listed = target.list_messages(
        P,
        "dead",
        ListQuery(
            marker=None,
            limit=10,
            client_id=BOB,
            echo=True,
            include_claimed=True,
            include_delayed=True,
        ),
        clock.now_ms(),
    )
    assert [m.id for m in listed.messages] == [mid]
    assert source.get_messages(P, "q", [mid], clock.now_ms()) == []


def test_a_pool_keeps_its_driver_over_weight_changes_and_retires_it_on_a_new_uri(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog_driver = open_test_driver(store_url(request, "embedded"))
    uri = store_url(request, "redis-server")
    opened: list[Driver] = []
    closed: list[Driver] = []

    def open_pool(record: PoolRecord) -> Driver:
        driver = open_test_driver(record.uri)
        real_close = driver.close
        monkeypatch.setattr(driver, "close", lambda: (closed.append(driver), real_close()))
        opened.append(driver)
        return driver

    catalog = catalog_driver.catalog()
    stores = PooledStores(catalog_driver, catalog, open_pool, refresh_s=0.0)
    try:
        catalog.put_pool(PoolRecord("p", uri, 10, None, {}))
        first = stores.place(P, "q")
        catalog.put_pool(PoolRecord("p", uri, 99, None, {}))  # a new weight: the same store
        stores.invalidate()
        assert stores.for_queue(P, "q") is first and opened == [first]
        catalog.put_pool(PoolRecord("p", uri, 99, None, {"key_prefix": "other"}))
        stores.invalidate()
        second = stores.for_queue(P, "q")
        assert second is not first and closed == []  # requests under way may still use it
        monkeypatch.setattr("zaqar_delay.stores.RETIRED_DRIVER_GRACE_S", 0.0)
        stores.for_queue(P, "q")
        assert closed == [first]
    finally:
        stores.close()
        close_test_driver(catalog_driver)
    assert closed == [first, second]


@pytest.mark.parametrize("catalog_store", ["embedded", "mongodb"])
def test_a_queue_created_again_while_a_stale_process_writes_its_old_pool_goes_back_there(
    request: pytest.FixtureRequest, catalog_store: str
) -> None:
    catalog_driver = open_test_driver(store_url(request, catalog_store))
    namespaces = {"x": f"t{uuid.uuid4().hex[:12]}", "y": f"t{uuid.uuid4().hex[:12]}"}
    uris = {"x": store_url(request, "redis-server"), "y": store_url(request, "mongodb")}
    catalog = catalog_driver.catalog()
    for name in namespaces:
        catalog.put_pool(PoolRecord(name, uris[name], 100, None, {}))

    def open_pool(record: PoolRecord) -> Driver:
        return open_test_driver(record.uri, namespace=namespaces[record.name])

    def first_pool(candidates: list[PoolRecord]) -> PoolRecord:
        return min(candidates, key=lambda p: p.name)  # "x"

    def last_pool(candidates: list[PoolRecord]) -> PoolRecord:
        return max(candidates, key=lambda p: p.name)  # "y"

    # Two processes: "stale" reads the catalog's generation once a minute; "fresh" at once.
    stale = PooledStores(catalog_driver, catalog, open_pool, 60.0, choose=first_pool)
    fresh = PooledStores(catalog_driver, catalog, open_pool, 0.05, choose=last_pool)
    try:
        assert stale.pool_of(P, "q") is None
        stale.place(P, "q").create_queue(P, "q", {}, 0)
        assert fresh.pool_of(P, "q") == "x"
        # The queue is deleted and created again through the fresh process, whose choice
        # alone would put it on "y".
        fresh.for_queue(P, "q").delete_queue(P, "q")
        fresh.forget(P, "q")
        fresh.place(P, "q").create_queue(P, "q", {}, 0)
        # The fault: the stale process has not seen the catalog move, and still writes to "x".
        assert stale.catalog.generation() != stale._generation
        posted = stale.for_queue(P, "q").post_messages(
            P, "q", [NewMessage('"late"', 600, 0)], ALICE, 0
        )
        # The queue went back to "x": what the stale process wrote is the queue's.
        assert fresh.pool_of(P, "q") == "x"
        found = fresh.for_queue(P, "q").get_messages(P, "q", posted.ids, 0)
        assert [m.body for m in found] == ["late"]
        # Once every process has read the change, a queue created again is placed afresh.
        fresh.for_queue(P, "q").delete_queue(P, "q")
        fresh.forget(P, "q")
        time.sleep(2 * 0.05 + STICKY_MARGIN_S + 0.2)
        fresh.place(P, "q")
        assert fresh.pool_of(P, "q") == "y"
    finally:
        stale.close()
        fresh.close()
        for name, uri in uris.items():
            close_test_driver(open_test_driver(uri, namespace=namespaces[name]))
        close_test_driver(catalog_driver)


def test_a_pool_or_flavor_set_up_by_another_process_serves_at_once(
    request: pytest.FixtureRequest,
) -> None:
    catalog_driver = open_test_driver(store_url(request, "embedded"))
    uri = store_url(request, "redis-server")
    namespace = f"t{uuid.uuid4().hex[:12]}"
    catalog = catalog_driver.catalog()

    def open_pool(record: PoolRecord) -> Driver:
        return open_test_driver(record.uri, namespace=namespace)

    # Two processes that read the catalog's generation once a minute only.
    admin = PooledStores(catalog_driver, catalog, open_pool, 60.0)
    other = PooledStores(catalog_driver, catalog, open_pool, 60.0)
    try:
        assert other.pools() == {}  # cached: no pool yet
        catalog.put_pool(PoolRecord("new", uri, 10, "fresh", {}))
        catalog.put_flavor(FlavorRecord("fresh", ["new"]))
        # A queue of the new flavor, created through the process that never saw either.
        other.place(P, "q", "fresh").create_queue(P, "q", {}, 0)
        assert other.pool_of(P, "q") == "new"
        # A queue another process placed on a pool this one has not read is served too.
        catalog.put_pool(PoolRecord("newer", uri, 10, None, {}))
        admin.place(P, "r").create_queue(P, "r", {"n": 1}, 0)
        assert admin.pool_of(P, "r") == "newer"
        assert other.for_queue(P, "r").get_metadata(P, "r") == {"n": 1}
    finally:
        admin.close()
        other.close()
        close_test_driver(open_test_driver(uri, namespace=namespace))
        close_test_driver(catalog_driver)
