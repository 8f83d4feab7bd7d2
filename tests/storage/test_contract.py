"""The storage contract, written once and run on every store in ``conftest.STORES``.

Time is a FakeClock handed to the driver as ``now_ms``; nothing here sleeps.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
from typing import Any

import pytest

from tests.helpers.pooled import CONTRACT_STORES, PooledDriver, one_store
from tests.helpers.stores import close_test_driver, namespace_of, open_test_driver
from zaqar_delay import errors, topics
from zaqar_delay.clock import FakeClock, arrival
from zaqar_delay.conf import Limits
from zaqar_delay.conf.transport import MAX_MESSAGE_TTL
from zaqar_delay.encryption import QueueEncryption
from zaqar_delay.models import (
    UNKNOWN_METADATA,
    Batch,
    ClaimTimes,
    Deletion,
    ListPage,
    ListQuery,
    MessageEdit,
    NewMessage,
    Posted,
    VersionedMetadata,
)
from zaqar_delay.policy import QueuePolicy
from zaqar_delay.posting import MessagePoster
from zaqar_delay.storage.base import Driver, metadata_version_of
from zaqar_delay.stores import Stores

# Every store, pooled (each queue on a redis-server or a MongoDB pool), and Swift.
pytestmark = pytest.mark.parametrize("store_uri", [*CONTRACT_STORES, "swift"], indirect=True)

P = "project-a"
Q = "jobs"
ALICE = "a" * 32
BOB = "b" * 32


def post(
    driver: Driver,
    clock: FakeClock,
    *bodies: Any,
    queue: str = Q,
    ttl: int = 3600,
    delay: int = 0,
    client: str = ALICE,
) -> list[str]:
    messages = [NewMessage(json.dumps(b), ttl, delay * 1000) for b in bodies]
    return driver.post_messages(P, queue, messages, client, clock.now_ms()).ids


def claim(
    driver: Driver,
    clock: FakeClock,
    limit: int = 10,
    ttl: int = 300,
    grace: int = 60,
    queue: str = Q,
):  # type: ignore[no-untyped-def]
    return driver.create_claim(P, queue, ClaimTimes(ttl, grace), limit, clock.now_ms())


def page(driver: Driver, clock: FakeClock, **kwargs: Any) -> ListPage:
    """One listing call with the defaults a plain consumer (BOB) uses."""
    options: dict[str, Any] = {"marker": None, "limit": 20, "client_id": BOB, **kwargs}
    return driver.list_messages(P, Q, ListQuery(**options), clock.now_ms())


def listed(driver: Driver, clock: FakeClock, **kwargs: Any) -> list[Any]:
    return [m.body for m in page(driver, clock, **kwargs).messages]


def bodies_of(claim_or_none: Any) -> list[Any]:
    return [] if claim_or_none is None else [m.body for m in claim_or_none.messages]


# -- queues ------------------------------------------------------------------------------------


class TestQueues:
    def test_create_once_then_existing_metadata_is_kept(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        assert driver.create_queue(P, Q, {"a": 1}, clock.now_ms()) is True
        assert driver.create_queue(P, Q, {"a": 2}, clock.now_ms()) is False
        assert driver.get_metadata(P, Q) == {"a": 1}

    def test_missing_queue_has_no_metadata(self, driver: Driver) -> None:
        assert driver.get_metadata(P, "nope") is None

    def test_set_metadata_replaces_and_needs_the_queue(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        driver.create_queue(P, Q, {"a": 1}, clock.now_ms())
        driver.set_metadata(P, Q, {"b": [1, 2]})
        assert driver.get_metadata(P, Q) == {"b": [1, 2]}
        with pytest.raises(errors.QueueDoesNotExist):
            driver.set_metadata(P, "nope", {})

    def test_metadata_of_many_queues_is_read_in_order_and_per_project(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        for name in ("b", "a", "c"):
            driver.create_queue(P, name, {"n": name}, clock.now_ms())
        driver.create_queue("other", "d", {"n": "d"}, clock.now_ms())
        wanted = ["c", "nope", "a", "d", "b"]
        assert driver.get_metadata_many(P, wanted) == [
            {"n": "c"},
            None,
            {"n": "a"},
            None,  # another project's
            {"n": "b"},
        ]
        assert driver.get_metadata_many(P, []) == []

    def test_metadata_put_on_many_queues_replaces_or_creates_and_keeps_messages(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        driver.create_queue(P, "kept", {"n": "old"}, clock.now_ms())
        [kept_id] = post(driver, clock, "kept message", queue="kept")
        driver.create_queue("other", "new", {"n": "other's"}, clock.now_ms())
        driver.put_metadata_many(P, {}, clock.now_ms())
        driver.put_metadata_many(P, {"kept": {"n": "kept"}, "new": {"n": "new"}}, clock.now_ms())
        assert driver.get_metadata_many(P, ["kept", "new"]) == [{"n": "kept"}, {"n": "new"}]
        assert driver.get_metadata("other", "new") == {"n": "other's"}
        assert [q.name for q in driver.list_queues(P, None, 10, detailed=False)] == ["kept", "new"]
        assert driver.count_queues(P) == 2
        [kept] = driver.get_messages(P, "kept", [kept_id], clock.now_ms())
        assert kept.body == "kept message"
        # A queue made by the put is a queue like any other: it takes posts and claims.
        post(driver, clock, "first", queue="new")
        assert bodies_of(claim(driver, clock, queue="new")) == ["first"]
        assert driver.create_queue(P, "new", {"n": "again"}, clock.now_ms()) is False
        driver.put_metadata_many(P, {"new": {"n": "newer"}}, clock.now_ms())
        assert driver.get_metadata(P, "new") == {"n": "newer"}

    def test_list_is_sorted_paged_and_per_project(self, driver: Driver, clock: FakeClock) -> None:
        for name in ("c", "a", "b", "d"):
            driver.create_queue(P, name, {"n": name}, clock.now_ms())
        driver.create_queue("other", "zz", {}, clock.now_ms())
        first = driver.list_queues(P, None, 2, detailed=False)
        assert [q.name for q in first] == ["a", "b"]
        assert all(q.metadata is None for q in first)
        rest = driver.list_queues(P, "b", 10, detailed=True)
        assert [(q.name, q.metadata) for q in rest] == [("c", {"n": "c"}), ("d", {"n": "d"})]
        assert driver.count_queues(P) == 4
        assert [q.name for q in driver.list_queues("other", None, 10, False)] == ["zz"]

    def test_a_topic_s_marked_name_is_a_queue_apart_that_lists_after_every_queue(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        """What topics rely on (``topics.py``): ``~name`` is stored as any other queue, apart
        from the queue ``name``, and sorts after every name a queue can have."""
        for name in ("zz", "a-z.Z_9", topics.stored("a"), topics.stored("zz")):
            driver.create_queue(P, name, {"name": name}, clock.now_ms())
        [topic_message] = post(driver, clock, "topic", queue=topics.stored("zz"))
        post(driver, clock, "queue", queue="zz")
        listed = driver.list_queues(P, None, 10, detailed=False)
        assert [q.name for q in listed] == ["a-z.Z_9", "zz", "~a", "~zz"]
        after_mark = driver.list_queues(P, topics.stored(""), 10, detailed=True)
        assert [(q.name, q.metadata) for q in after_mark] == [
            ("~a", {"name": "~a"}),
            ("~zz", {"name": "~zz"}),
        ]
        [found] = driver.get_messages(P, topics.stored("zz"), [topic_message], clock.now_ms())
        assert found.body == "topic"
        assert driver.get_messages(P, "zz", [topic_message], clock.now_ms()) == []
        driver.delete_queue(P, topics.stored("zz"))
        assert driver.stats(P, "zz", clock.now_ms()).total == 1

    def test_post_creates_and_lists_the_queue(self, driver: Driver, clock: FakeClock) -> None:
        post(driver, clock, 1)
        assert driver.get_metadata(P, Q) == {}
        assert [q.name for q in driver.list_queues(P, None, 10, False)] == [Q]

    def test_delete_removes_messages_and_is_idempotent(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        ids = post(driver, clock, 1, 2)
        driver.delete_queue(P, Q)
        driver.delete_queue(P, Q)
        assert driver.get_metadata(P, Q) is None
        assert driver.get_messages(P, Q, ids, clock.now_ms()) == []
        assert driver.count_queues(P) == 0

    def test_purge_removes_delayed_and_claimed_messages_keeps_queue(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        driver.create_queue(P, Q, {"_default_message_delay": 10}, clock.now_ms())
        post(driver, clock, "ready")
        post(driver, clock, "delayed", delay=60)
        assert claim(driver, clock, limit=1) is not None
        driver.purge(P, Q)
        assert driver.stats(P, Q, clock.now_ms()).total == 0
        assert driver.get_metadata(P, Q) == {"_default_message_delay": 10}
        clock.advance(3600)
        assert claim(driver, clock) is None


# -- posting and reading -----------------------------------------------------------------------


class TestMessages:
    def test_bodies_round_trip_in_order(self, driver: Driver, clock: FakeClock) -> None:
        bodies = [{"k": [1, 2.5, None, True]}, "text é", 42, [], None, {"nested": {"x": "y"}}]
        ids = post(driver, clock, *bodies)
        assert len(set(ids)) == len(ids)
        found = driver.get_messages(P, Q, list(reversed(ids)), clock.now_ms())
        assert [m.body for m in found] == list(reversed(bodies))
        assert listed(driver, clock) == bodies

    def test_large_batch_is_stored_whole(
        self, driver: Driver, clock: FakeClock, store_uri: str
    ) -> None:
        # Swift commits a post of several only within its post deadline (40 s, SwiftTimes),
        # else refuses it whole; the test all-in-one writes some 190 messages a second, but
        # under the suite's load on a slow 2-core host under 50 (a post of 2,000 missed the
        # deadline there), so its large batch is 1,000.
        size = 1000 if store_uri.startswith("swift") else 5000
        ids = post(driver, clock, *range(size), ttl=60)
        assert len(ids) == size
        assert driver.stats(P, Q, clock.now_ms()).total == size

    def test_message_fields(self, driver: Driver, clock: FakeClock) -> None:
        [mid] = post(driver, clock, "x", ttl=120, delay=5)
        clock.advance(2)
        [m] = driver.get_messages(P, Q, [mid], clock.now_ms())
        assert (m.ttl_s, m.age_s(clock.now_ms()), m.claim_id, m.claim_count) == (120, 2, None, 0)
        assert m.due_ms == m.created_ms + 5000
        assert m.expires_ms == m.created_ms + 120_000
        assert m.client_id == ALICE

    def test_unknown_ids_are_skipped(self, driver: Driver, clock: FakeClock) -> None:
        [mid] = post(driver, clock, "x")
        found = driver.get_messages(P, Q, ["nope", mid, "0" * 32], clock.now_ms())
        assert [m.id for m in found] == [mid]

    def test_delayed_message_is_hidden_until_the_exact_due_millisecond(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        post(driver, clock, "later", delay=30)
        clock.advance(ms=29_999)
        assert listed(driver, clock) == []
        assert listed(driver, clock, include_delayed=True) == ["later"]
        assert claim(driver, clock) is None
        assert driver.pop_messages(P, Q, 5, clock.now_ms()) == []
        clock.advance(ms=1)
        assert listed(driver, clock) == ["later"]
        assert bodies_of(claim(driver, clock)) == ["later"]

    def test_get_by_id_sees_delayed_messages(self, driver: Driver, clock: FakeClock) -> None:
        [mid] = post(driver, clock, "later", delay=600)
        assert [m.body for m in driver.get_messages(P, Q, [mid], clock.now_ms())] == ["later"]

    def test_echo_hides_own_messages(self, driver: Driver, clock: FakeClock) -> None:
        post(driver, clock, "mine", client=BOB)
        post(driver, clock, "theirs", client=ALICE)
        assert listed(driver, clock, client_id=BOB) == ["theirs"]
        assert listed(driver, clock, client_id=BOB, echo=True) == ["mine", "theirs"]

    def test_claimed_messages_hidden_unless_included(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        post(driver, clock, 1, 2, 3)
        claim(driver, clock, limit=1)
        assert listed(driver, clock) == [2, 3]
        # Upstream's Redis driver fails this one without a marker (B3).
        assert listed(driver, clock, include_claimed=True) == [1, 2, 3]

    def test_paging_by_marker(self, driver: Driver, clock: FakeClock) -> None:
        post(driver, clock, *range(10))
        pages, marker = [], None
        while True:
            result = page(driver, clock, marker=marker, limit=3)
            if not result.messages:
                assert result.next_marker is None
                break
            pages.append([m.body for m in result.messages])
            marker = result.next_marker
        assert pages == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]

    def test_marker_skips_hidden_messages(self, driver: Driver, clock: FakeClock) -> None:
        driver.create_queue(P, Q, {"_default_message_delay": 10}, clock.now_ms())
        post(driver, clock, "a")
        post(driver, clock, *[f"d{i}" for i in range(30)], delay=60)
        post(driver, clock, "b")
        first = page(driver, clock, limit=1)
        assert [m.body for m in first.messages] == ["a"]
        assert listed(driver, clock, marker=first.next_marker) == ["b"]

    def test_unknown_marker_lists_from_the_start(self, driver: Driver, clock: FakeClock) -> None:
        post(driver, clock, "a", "b")
        # As Zaqar: a marker that names nothing known is the first page, not an error.
        for marker in ("not-a-marker", "invalid", "0" * 40, "ff" * 20):
            assert listed(driver, clock, marker=marker) == ["a", "b"]

    def test_message_id_marker_lists_after_that_message(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        ids = post(driver, clock, "a", "b", "c", "d")
        assert listed(driver, clock, marker=ids[1]) == ["c", "d"]
        assert listed(driver, clock, marker=ids[3]) == []
        driver.delete_message(P, Q, ids[0], None, clock.now_ms())
        # A deleted message names nothing any more: the first page.
        assert listed(driver, clock, marker=ids[0]) == ["b", "c", "d"]

    def test_expired_messages_are_never_returned(self, driver: Driver, clock: FakeClock) -> None:
        [mid] = post(driver, clock, "short", ttl=60)
        post(driver, clock, "long", ttl=3600)
        clock.advance(60)
        assert driver.get_messages(P, Q, [mid], clock.now_ms()) == []
        assert listed(driver, clock) == ["long"]
        assert driver.stats(P, Q, clock.now_ms()).total == 1
        assert bodies_of(claim(driver, clock)) == ["long"]

    def test_the_longest_ttl_the_configuration_allows_is_kept(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        [mid] = post(driver, clock, "long", ttl=MAX_MESSAGE_TTL)
        [kept] = driver.get_messages(P, Q, [mid], clock.now_ms())
        assert kept.ttl_s == MAX_MESSAGE_TTL

    def test_ttl_shorter_than_delay_expires_unseen(self, driver: Driver, clock: FakeClock) -> None:
        post(driver, clock, "never", ttl=60, delay=120)
        for _ in range(4):
            clock.advance(40)
            assert claim(driver, clock) is None
            assert driver.pop_messages(P, Q, 1, clock.now_ms()) == []
        assert driver.stats(P, Q, clock.now_ms()).total == 0


def test_listing_behind_many_hidden_messages_continues_past_the_scan_budget(store_uri: str) -> None:
    one_store(store_uri)
    clock = FakeClock()
    driver = open_test_driver(store_uri, list_scan_budget=10)
    try:
        # Hidden by their claims: a listing in due order (Swift's) and one in posting order
        # (the others') both meet them first.
        post(driver, clock, *range(25))
        held = [claim(driver, clock, limit=10) for _ in range(3)]
        assert sum(len(bodies_of(c)) for c in held) == 25
        driver.post_messages(P, Q, [NewMessage('"visible"', 3600, 0)], ALICE, clock.now_ms())
        marker, pages = None, []
        for _ in range(10):
            result = page(driver, clock, marker=marker, limit=5)
            pages.append([m.body for m in result.messages])
            if result.next_marker is None:
                break
            marker = result.next_marker
        # 25 hidden then 1 visible, 10 examined per call: two empty pages that still link on.
        assert pages == [[], [], ["visible"], []]
    finally:
        close_test_driver(driver)


# -- deleting ----------------------------------------------------------------------------------


def stored_ttl(driver: Driver, clock: FakeClock, posted: Any) -> int:
    assert isinstance(posted, Posted), posted
    return driver.get_messages(P, Q, posted.ids, clock.now_ms())[0].ttl_s


class TestConditionalPost:
    """A post stored only under the metadata its messages were built from (post_if_current),
    and the poster that builds them again when another server changed it."""

    def test_unknown_metadata_stores_nothing_and_answers_the_queue_s(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        answer = driver.post_if_current(
            P, Q, Batch([NewMessage('"m"', 60, 0)], ALICE), clock.now_ms(), UNKNOWN_METADATA.version
        )
        assert answer == VersionedMetadata({}, "")
        assert driver.get_metadata(P, Q) is None
        metadata = {"zone": "b", "_default_message_ttl": 100}  # not in sorted order
        driver.create_queue(P, Q, metadata, clock.now_ms())
        answer = driver.post_if_current(P, Q, Batch([], ALICE), clock.now_ms(), "")
        assert isinstance(answer, VersionedMetadata)
        assert answer.metadata == metadata
        # One version scheme on every store: the SHA-1 of the metadata text as stored.
        assert answer.version == metadata_version_of(json.dumps(metadata))
        assert driver.stats(P, Q, clock.now_ms()).total == 0

    def test_a_missing_queue_is_created_under_the_version_it_answers(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        posted = driver.post_if_current(
            P, Q, Batch([NewMessage('"m"', 60, 0)], ALICE), clock.now_ms(), ""
        )
        assert isinstance(posted, Posted)
        assert posted.metadata_version == metadata_version_of("{}")
        assert driver.get_metadata(P, Q) == {}
        again = driver.post_if_current(
            P, Q, Batch([NewMessage('"m"', 70, 0)], ALICE), clock.now_ms(), posted.metadata_version
        )
        assert stored_ttl(driver, clock, again) == 70

    def test_a_stale_version_stores_nothing(
        self, driver: Driver, clock: FakeClock, store_uri: str
    ) -> None:
        other = open_test_driver(one_store(store_uri), namespace=namespace_of(driver))
        try:
            driver.create_queue(P, Q, {"_default_message_ttl": 100}, clock.now_ms())
            first = driver.post_if_current(P, Q, Batch([], ALICE), clock.now_ms(), "")
            assert isinstance(first, VersionedMetadata)
            other.set_metadata(P, Q, {"_default_message_ttl": 200})
            answer = driver.post_if_current(
                P, Q, Batch([NewMessage('"m"', 100, 0)], ALICE), clock.now_ms(), first.version
            )
            assert isinstance(answer, VersionedMetadata)
            assert answer.metadata == {"_default_message_ttl": 200}
            assert answer.version != first.version
            assert driver.stats(P, Q, clock.now_ms()).total == 0
        finally:
            other.close()

    def test_the_poster_uses_metadata_another_server_changed_at_once(
        self, driver: Driver, clock: FakeClock, store_uri: str
    ) -> None:
        other = open_test_driver(one_store(store_uri), namespace=namespace_of(driver))
        poster = MessagePoster(
            Stores(driver), Limits(default_message_ttl=60), QueueEncryption(None)
        )
        try:
            driver.create_queue(P, Q, {"_default_message_ttl": 100}, clock.now_ms())

            def posted_ttl() -> int:
                posted, _ = poster.post(
                    P, Q, b'{"messages": [{"body": 1}]}', ALICE, *arrival(clock)
                )
                return stored_ttl(driver, clock, posted)

            assert posted_ttl() == 100
            other.set_metadata(P, Q, {"_default_message_ttl": 200})
            assert posted_ttl() == 200
            other.delete_queue(P, Q)
            other.create_queue(P, Q, {"_default_message_ttl": 300}, clock.now_ms())
            assert posted_ttl() == 300
            other.delete_queue(P, Q)
            assert posted_ttl() == 60
        finally:
            other.close()

    def test_a_size_limit_another_server_raised_is_honoured_at_once(
        self, driver: Driver, clock: FakeClock, store_uri: str
    ) -> None:
        other = open_test_driver(one_store(store_uri), namespace=namespace_of(driver))
        poster = MessagePoster(Stores(driver), Limits(), QueueEncryption(None))
        payload = b'{"messages": [{"body": "' + b"x" * 300 + b'"}]}'
        try:
            driver.create_queue(P, Q, {"_max_messages_post_size": 100}, clock.now_ms())
            poster.post(P, Q, b'{"messages": [{"body": 1}]}', ALICE, *arrival(clock))
            with pytest.raises(errors.InvalidRequest, match="max size for current queue is 100"):
                poster.post(P, Q, payload, ALICE, *arrival(clock))
            other.set_metadata(P, Q, {"_max_messages_post_size": 1000})
            posted, _ = poster.post(P, Q, payload, ALICE, *arrival(clock))
            assert len(posted.ids) == 1
            other.set_metadata(P, Q, {"_max_messages_post_size": 200})
            with pytest.raises(errors.InvalidRequest, match="max size for current queue is 200"):
                poster.post(P, Q, payload, ALICE, *arrival(clock))
        finally:
            other.close()

    def test_a_refused_post_stores_nothing(self, driver: Driver, clock: FakeClock) -> None:
        poster = MessagePoster(
            Stores(driver), Limits(max_messages_post_size=10), QueueEncryption(None)
        )
        with pytest.raises(errors.InvalidRequest, match="too large"):
            poster.post(P, Q, b'{"messages": [{"body": "long"}]}', ALICE, *arrival(clock))
        assert driver.get_metadata(P, Q) is None


class TestDelete:
    def test_unclaimed_and_missing(self, driver: Driver, clock: FakeClock) -> None:
        [mid] = post(driver, clock, "x")
        assert driver.delete_message(P, Q, "missing", None, clock.now_ms()) is False
        assert driver.delete_message(P, Q, mid, None, clock.now_ms()) is True
        assert driver.get_messages(P, Q, [mid], clock.now_ms()) == []
        assert driver.delete_message(P, Q, mid, None, clock.now_ms()) is False  # gone already

    def test_an_expired_message_is_removed_unreported(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        [alone, among] = post(driver, clock, "alone", "among", ttl=60)
        [kept] = post(driver, clock, "kept")
        clock.advance(61)
        now = clock.now_ms()
        assert driver.delete_message(P, Q, alone, None, now) is False
        assert driver.delete_messages(P, Q, Deletion([among, kept]), now) == [kept]
        assert driver.get_messages(P, Q, [kept], now) == []

    def test_claim_rules(self, driver: Driver, clock: FakeClock) -> None:
        [m1, m2] = post(driver, clock, 1, 2)
        first = claim(driver, clock, limit=1)
        second = claim(driver, clock, limit=1)
        assert first is not None and second is not None
        now = clock.now_ms()
        with pytest.raises(errors.MessageIsClaimed):
            driver.delete_message(P, Q, m1, None, now)
        with pytest.raises(errors.MessageIsClaimed):
            driver.delete_message(P, Q, m1, second.id, now)  # a live claim, not this message's
        with pytest.raises(errors.ClaimNotValid):
            driver.delete_message(P, Q, m1, "f" * 32, now)  # no such claim
        assert driver.delete_message(P, Q, m1, first.id, now) is True
        assert driver.get_messages(P, Q, [m1], now) == []
        driver.release_claim(P, Q, second.id, now)
        with pytest.raises(errors.ClaimNotValid):
            driver.delete_message(P, Q, m2, second.id, now)  # released: not claimed any more

    def test_expired_claim_id_is_refused(self, driver: Driver, clock: FakeClock) -> None:
        [mid] = post(driver, clock, 1)
        held = claim(driver, clock, ttl=60)
        assert held is not None
        clock.advance(60)
        with pytest.raises(errors.ClaimNotValid):
            driver.delete_message(P, Q, mid, held.id, clock.now_ms())
        driver.delete_message(P, Q, mid, None, clock.now_ms())

    def test_bulk_ignores_claims_by_default(self, driver: Driver, clock: FakeClock) -> None:
        ids = post(driver, clock, 1, 2, 3)
        claim(driver, clock, limit=1)
        named = Deletion([ids[1], "missing", ids[0], ids[1]])
        assert driver.delete_messages(P, Q, named, clock.now_ms()) == [ids[1], ids[0]]
        assert [m.body for m in driver.get_messages(P, Q, ids, clock.now_ms())] == [3]
        assert driver.delete_messages(P, Q, named, clock.now_ms()) == []  # gone already

    def test_bulk_with_claim_ids_is_all_or_nothing(self, driver: Driver, clock: FakeClock) -> None:
        ids = post(driver, clock, 1, 2, 3)
        held = claim(driver, clock, limit=1)
        other = claim(driver, clock, limit=1)
        assert held is not None and other is not None
        with pytest.raises(errors.MessageIsClaimed):
            driver.delete_messages(P, Q, Deletion(ids, [held.id]), clock.now_ms())
        assert len(driver.get_messages(P, Q, ids, clock.now_ms())) == 3
        both = Deletion(ids, [held.id, other.id])
        assert driver.delete_messages(P, Q, both, clock.now_ms()) == ids
        assert driver.get_messages(P, Q, ids, clock.now_ms()) == []


# -- pop ---------------------------------------------------------------------------------------


class TestPop:
    def test_pop_takes_claimable_messages_only(self, driver: Driver, clock: FakeClock) -> None:
        post(driver, clock, "held", "free1")
        post(driver, clock, "delayed", delay=30)
        post(driver, clock, "free2")
        claim(driver, clock, limit=1)
        popped = driver.pop_messages(P, Q, 10, clock.now_ms())
        assert [m.body for m in popped] == ["free1", "free2"]
        assert listed(driver, clock, include_claimed=True, include_delayed=True) == [
            "held",
            "delayed",
        ]

    def test_a_pop_counts_as_a_delivery(self, driver: Driver, clock: FakeClock) -> None:
        post(driver, clock, "claimed before", "never claimed")
        held = claim(driver, clock, limit=1)
        assert held is not None
        driver.release_claim(P, Q, held.id, clock.now_ms())
        popped = driver.pop_messages(P, Q, 10, clock.now_ms())
        assert [(m.body, m.claim_count) for m in popped] == [
            ("claimed before", 2),
            ("never claimed", 1),
        ]


# -- claims ------------------------------------------------------------------------------------


class TestClaims:
    def test_nothing_to_claim(self, driver: Driver, clock: FakeClock) -> None:
        assert claim(driver, clock) is None
        driver.create_queue(P, Q, {}, clock.now_ms())
        assert claim(driver, clock) is None

    def test_oldest_first_and_limit(self, driver: Driver, clock: FakeClock) -> None:
        post(driver, clock, *range(5))
        assert bodies_of(claim(driver, clock, limit=2)) == [0, 1]
        assert bodies_of(claim(driver, clock, limit=10)) == [2, 3, 4]

    def test_delayed_message_behind_a_ready_one_is_not_claimed(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        # Upstream B2 (1): queue delay 30, m1 default, m2 delay 0, m3 delay 120 -> only m2.
        post(driver, clock, "m1", delay=30)
        post(driver, clock, "m2", delay=0)
        post(driver, clock, "m3", delay=120)
        assert bodies_of(claim(driver, clock)) == ["m2"]
        clock.advance(30)
        assert bodies_of(claim(driver, clock)) == ["m1"]
        clock.advance(90)
        assert bodies_of(claim(driver, clock)) == ["m3"]

    def test_message_held_by_live_claim_is_not_stolen_after_an_older_release(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        # Upstream B2 (2): release A must not hand B's message to C.
        post(driver, clock, "m1", "m2", "m3")
        a = claim(driver, clock, limit=1)
        b = claim(driver, clock, limit=1)
        assert a is not None and b is not None
        driver.release_claim(P, Q, a.id, clock.now_ms())
        assert bodies_of(claim(driver, clock)) == ["m1", "m3"]
        assert bodies_of(driver.get_claim(P, Q, b.id, clock.now_ms())) == ["m2"]

    def test_claim_fields_and_hrefs(self, driver: Driver, clock: FakeClock) -> None:
        post(driver, clock, "x")
        held = claim(driver, clock, ttl=100, grace=60)
        assert held is not None
        [m] = held.messages
        assert (m.claim_id, m.claim_count) == (held.id, 1)
        assert held.ttl_s == 100
        clock.advance(7)
        got = driver.get_claim(P, Q, held.id, clock.now_ms())
        assert (got.ttl_s, got.age_s(clock.now_ms()), bodies_of(got)) == (100, 7, ["x"])

    def test_claim_expiry_returns_messages_in_their_place(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        post(driver, clock, "m1", "m2")
        held = claim(driver, clock, limit=1, ttl=60)
        assert held is not None
        clock.advance(59)
        assert bodies_of(claim(driver, clock)) == ["m2"]
        clock.advance(1)
        with pytest.raises(errors.ClaimDoesNotExist):
            driver.get_claim(P, Q, held.id, clock.now_ms())
        again = claim(driver, clock)
        assert bodies_of(again) == ["m1"]
        assert again is not None and again.messages[0].claim_count == 2

    def test_release_makes_messages_claimable_at_once(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        post(driver, clock, "m1", "m2")
        held = claim(driver, clock)
        assert held is not None
        driver.release_claim(P, Q, held.id, clock.now_ms())
        driver.release_claim(P, Q, held.id, clock.now_ms())  # unknown now: no-op
        with pytest.raises(errors.ClaimDoesNotExist):
            driver.get_claim(P, Q, held.id, clock.now_ms())
        assert listed(driver, clock) == ["m1", "m2"]
        assert bodies_of(claim(driver, clock)) == ["m1", "m2"]

    def test_claim_count_survives_release_and_renew(self, driver: Driver, clock: FakeClock) -> None:
        post(driver, clock, "x")
        for expected in (1, 2, 3):
            held = claim(driver, clock)
            assert held is not None and held.messages[0].claim_count == expected
            driver.renew_claim(P, Q, held.id, 120, 60, clock.now_ms())
            renewed = driver.get_claim(P, Q, held.id, clock.now_ms())
            assert renewed.messages[0].claim_count == expected
            driver.release_claim(P, Q, held.id, clock.now_ms())

    def test_renew(self, driver: Driver, clock: FakeClock) -> None:
        post(driver, clock, "x")
        held = claim(driver, clock, ttl=60)
        assert held is not None
        clock.advance(50)
        driver.renew_claim(P, Q, held.id, 100, 60, clock.now_ms())
        clock.advance(60)
        got = driver.get_claim(P, Q, held.id, clock.now_ms())
        assert (got.ttl_s, got.age_s(clock.now_ms()), bodies_of(got)) == (100, 60, ["x"])
        assert claim(driver, clock) is None
        clock.advance(40)
        with pytest.raises(errors.ClaimDoesNotExist):
            driver.renew_claim(P, Q, held.id, 100, 60, clock.now_ms())
        with pytest.raises(errors.ClaimDoesNotExist):
            driver.renew_claim(P, Q, "nope", 100, 60, clock.now_ms())

    @pytest.mark.parametrize(
        ("claim_ttl", "grace", "expected_ttl"),
        [(777, 0, 777), (777, 23, 800), (121, 22, 143), (60, 30, 120)],
    )
    def test_lifetime_extension(
        self, driver: Driver, clock: FakeClock, claim_ttl: int, grace: int, expected_ttl: int
    ) -> None:
        [mid] = post(driver, clock, "x", ttl=120)
        held = claim(driver, clock, ttl=claim_ttl, grace=grace)
        assert held is not None and held.messages[0].ttl_s == expected_ttl
        [m] = driver.get_messages(P, Q, [mid], clock.now_ms())
        assert m.ttl_s == expected_ttl
        extended = claim_ttl > 120
        expected_expiry = held.expires_ms + grace * 1000 if extended else m.created_ms + 120_000
        assert m.expires_ms == expected_expiry

    def test_dead_letter_after_max_claim_count(self, driver: Driver, clock: FakeClock) -> None:
        driver.create_queue(
            P,
            Q,
            {
                "_max_claim_count": 2,
                "_dead_letter_queue": "dlq",
                "_dead_letter_queue_messages_ttl": 600,
            },
            clock.now_ms(),
        )
        [mid] = post(driver, clock, "poison", ttl=3600)
        for _ in range(2):
            held = claim(driver, clock)
            assert bodies_of(held) == ["poison"]
            assert held is not None
            driver.release_claim(P, Q, held.id, clock.now_ms())
        # The claim reports the message over the limit, claims nothing, and leaves it where
        # it was, taken, so no other claim takes it before it is moved.
        outcome = driver.claim(P, Q, ClaimTimes(300, 60), 10, clock.now_ms())
        assert outcome.claim is None and outcome.over_limit is not None
        over = outcome.over_limit
        assert (over.queue, over.ttl_s, over.ids) == ("dlq", 600, (mid,))
        assert [m.body for m in over.messages] == ["poison"]
        assert claim(driver, clock) is None
        assert [m.id for m in driver.get_messages(P, Q, [mid], clock.now_ms())] == [mid]
        driver.move_dead_letters(P, Q, over, clock.now_ms())
        assert driver.get_messages(P, Q, [mid], clock.now_ms()) == []
        [moved] = driver.get_messages(P, "dlq", [mid], clock.now_ms())
        assert (moved.body, moved.ttl_s, moved.claim_id, moved.claim_count) == (
            "poison",
            600,
            None,
            0,
        )
        assert moved.expires_ms == clock.now_ms() + 600_000
        dead_claim = claim(driver, clock, queue="dlq")
        assert bodies_of(dead_claim) == ["poison"]

    def test_no_dead_letter_without_both_keys(self, driver: Driver, clock: FakeClock) -> None:
        driver.create_queue(P, Q, {"_max_claim_count": 1}, clock.now_ms())
        post(driver, clock, "x")
        for _ in range(3):
            held = claim(driver, clock)
            assert held is not None
            driver.release_claim(P, Q, held.id, clock.now_ms())

    @pytest.mark.racing
    def test_concurrent_claimers_never_share_a_message(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        ids = post(driver, clock, *range(150))
        seen: list[str] = []
        lock = threading.Lock()

        def consume() -> None:
            while True:
                held = claim(driver, clock, limit=3)
                if held is None:
                    return
                with lock:
                    seen.extend(m.id for m in held.messages)

        threads = [threading.Thread(target=consume) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(seen) == sorted(ids)
        # Each message was taken by exactly one claim: a second taker would have counted too.
        counts = [m.claim_count for m in driver.get_messages(P, Q, ids, clock.now_ms())]
        assert counts == [1] * len(ids)

    @pytest.mark.racing
    def test_concurrent_one_message_claims_each_get_one(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        # Consumers taking one message at a time all aim at the oldest: a claimer that loses
        # the race must go on to another message, not answer "nothing to claim".
        contenders = 12
        ids = post(driver, clock, *range(contenders))
        start = threading.Barrier(contenders)
        taken: list[list[str]] = []
        lock = threading.Lock()

        def consume_one() -> None:
            start.wait()
            held = claim(driver, clock, limit=1)
            with lock:
                taken.append([m.id for m in held.messages] if held else [])

        threads = [threading.Thread(target=consume_one) for _ in range(contenders)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(len(t) for t in taken) == [1] * contenders
        assert sorted(i for t in taken for i in t) == sorted(ids)


def _claim_until_empty(uri: str, namespace: str, now_ms: int) -> list[str]:
    """Runs in a child process: claim batches of 3 until nothing is left."""
    driver = open_test_driver(uri, namespace=namespace, racing=True)
    seen: list[str] = []
    try:
        while True:
            held = driver.create_claim(P, Q, ClaimTimes(300, 60), 3, now_ms)
            if held is None:
                return seen
            seen.extend(m.id for m in held.messages)
    finally:
        driver.close()


@pytest.mark.racing
def test_concurrent_claimers_in_several_processes(
    store_uri: str, driver: Driver, clock: FakeClock
) -> None:
    one_store(store_uri)
    ids = post(driver, clock, *range(120))
    # Forked from a server process that imported this module once (not spawned: each of
    # four spawned children would import it again for each store), never from this threaded
    # worker itself.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    with context.Pool(4) as pool:
        results = pool.starmap(
            _claim_until_empty, [(one_store(store_uri), namespace_of(driver), clock.now_ms())] * 4
        )
    claimed = [i for result in results for i in result]
    assert sorted(claimed) == sorted(ids)  # every message once: none twice, none skipped
    counts = [m.claim_count for m in driver.get_messages(P, Q, ids, clock.now_ms())]
    assert counts == [1] * len(ids)


# -- idempotent posting ------------------------------------------------------------------------


def post_dedup(
    driver: Driver,
    clock: FakeClock,
    *pairs: tuple[Any, str],
    queue: str = Q,
    ttl: int = 3600,
    project: str = P,
) -> Posted:
    """Post (body, dedup_id) pairs."""
    messages = [NewMessage(json.dumps(b), ttl, 0, d) for b, d in pairs]
    return driver.post_messages(project, queue, messages, ALICE, clock.now_ms())


class TestDedup:
    def test_a_repeated_dedup_id_returns_the_first_message(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        first = post_dedup(driver, clock, ("a", "k1"), ("b", "k2"))
        assert first.duplicates == ()
        again = post_dedup(driver, clock, ("a2", "k2"), ("c", "k3"), ("a3", "k1"))
        assert again.duplicates == (0, 2)
        assert again.ids[0] == first.ids[1] and again.ids[2] == first.ids[0]
        assert again.ids[1] not in first.ids
        assert again.stored() == [1]
        assert sorted(listed(driver, clock)) == ["a", "b", "c"]

    def test_repeats_within_one_post_store_one_message(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        posted = post_dedup(driver, clock, ("x", "same"), (None, ""), ("y", "same"), ("z", "same"))
        assert posted.duplicates == (2, 3)
        assert posted.ids[0] == posted.ids[2] == posted.ids[3] != posted.ids[1]
        assert listed(driver, clock) == ["x", None]

    def test_messages_without_dedup_id_are_never_duplicates(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        posted = post_dedup(driver, clock, ("x", ""), ("x", ""))
        assert posted.duplicates == () and len(set(posted.ids)) == 2

    def test_remembered_after_delete_until_the_first_message_would_expire(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        [mid] = post_dedup(driver, clock, ("job", "k"), ttl=120).ids
        held = claim(driver, clock)
        assert held is not None
        driver.delete_message(P, Q, mid, held.id, clock.now_ms())
        clock.advance(119.999)
        assert post_dedup(driver, clock, ("job", "k"), ttl=600).ids == [mid]
        assert listed(driver, clock) == []
        clock.advance(ms=1)
        renewed = post_dedup(driver, clock, ("job", "k"), ttl=600)
        assert renewed.duplicates == () and renewed.ids != [mid]
        assert listed(driver, clock) == ["job"]
        clock.advance(599)
        assert post_dedup(driver, clock, ("job", "k")).ids == renewed.ids

    def test_remembered_for_its_own_ttl_when_shorter_than_the_message_s(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        """A message lives 600 s and its dedup id is remembered 120 s (``dedup_ttl_s``): a
        repeat after 120 s is stored, beside the first message, which lives on."""
        first = NewMessage(json.dumps("tick"), 600, 0, "k", dedup_ttl_s=120)
        [mid] = driver.post_messages(P, Q, [first], ALICE, clock.now_ms()).ids
        clock.advance(119.999)
        assert post_dedup(driver, clock, ("tick", "k"), ttl=600).ids == [mid]
        clock.advance(ms=1)
        again = post_dedup(driver, clock, ("tick", "k"), ttl=600)
        assert again.duplicates == () and again.ids != [mid]
        assert listed(driver, clock) == ["tick", "tick"]
        clock.advance(479)
        assert post_dedup(driver, clock, ("tick", "k")).ids == again.ids

    def test_scoped_by_project_and_queue(self, driver: Driver, clock: FakeClock) -> None:
        ids = {
            post_dedup(driver, clock, ("m", "k"), queue=q, project=p).ids[0]
            for p, q in [(P, Q), (P, "other"), ("project-b", Q)]
        }
        assert len(ids) == 3

    def test_purge_and_delete_forget(self, driver: Driver, clock: FakeClock) -> None:
        [first] = post_dedup(driver, clock, ("m", "k")).ids
        driver.purge(P, Q)
        [second] = post_dedup(driver, clock, ("m", "k")).ids
        assert second != first
        driver.delete_queue(P, Q)
        posted = post_dedup(driver, clock, ("m", "k"))
        assert posted.duplicates == () and posted.ids != [second]

    @pytest.mark.racing
    def test_concurrent_duplicates_store_each_id_once(
        self, store_uri: str, driver: Driver, clock: FakeClock
    ) -> None:
        one_store(store_uri)
        keys = [f"k{i}" for i in range(30)]
        results: list[tuple[list[str], Posted]] = []
        errors_seen: list[Exception] = []

        def poster() -> None:
            own = open_test_driver(
                one_store(store_uri), namespace=namespace_of(driver), racing=True
            )
            try:
                for start in range(0, len(keys), 5):
                    chunk = keys[start : start + 5]
                    results.append((chunk, post_dedup(own, clock, *[(k, k) for k in chunk])))
            except Exception as exc:  # noqa: BLE001 - reported below: a thread cannot fail the test
                errors_seen.append(exc)
            finally:
                own.close()  # not close_test_driver: that drops the shared namespace

        threads = [threading.Thread(target=poster) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors_seen == []
        assert sum(len(r.stored()) for _, r in results) == len(keys)
        ids_by_key: dict[str, set[str]] = {}
        for chunk, result in results:
            for key, mid in zip(chunk, result.ids, strict=True):
                ids_by_key.setdefault(key, set()).add(mid)
        assert all(len(ids) == 1 for ids in ids_by_key.values())
        assert driver.stats(P, Q, clock.now_ms()).total == len(keys)
        assert sorted(listed(driver, clock, limit=100)) == sorted(keys)


# -- stats -------------------------------------------------------------------------------------


class TestStats:
    def test_missing_queue(self, driver: Driver, clock: FakeClock) -> None:
        s = driver.stats(P, "nope", clock.now_ms())
        assert (s.total, s.claimed, s.free, s.delayed) == (0, 0, 0, 0)
        assert (s.next_due_ms, s.oldest, s.newest) == (None, None, None)

    def test_all_delayed(self, driver: Driver, clock: FakeClock) -> None:
        # Upstream B1: Mongo answers 503 here.
        ids = post(driver, clock, 1, 2, delay=60)
        s = driver.stats(P, Q, clock.now_ms())
        assert (s.total, s.claimed, s.free, s.delayed) == (2, 0, 2, 2)
        assert s.next_due_ms == clock.now_ms() + 60_000
        assert s.oldest is not None and s.newest is not None
        assert (s.oldest.id, s.newest.id) == (ids[0], ids[1])

    def test_next_due_skips_claimed_and_expired_messages(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        start = clock.now_ms()
        post(driver, clock, "expires-first", ttl=60, delay=120)
        post(driver, clock, "later", delay=300)
        post(driver, clock, "sooner", delay=200)
        assert driver.stats(P, Q, clock.now_ms()).next_due_ms == start + 120_000
        clock.advance(61)
        assert driver.stats(P, Q, clock.now_ms()).next_due_ms == start + 200_000
        clock.advance(140)
        assert bodies_of(claim(driver, clock)) == ["sooner"]
        s = driver.stats(P, Q, clock.now_ms())
        assert (s.delayed, s.next_due_ms) == (1, start + 300_000)
        clock.advance(100)
        assert driver.stats(P, Q, clock.now_ms()).next_due_ms is None

    def test_counts(self, driver: Driver, clock: FakeClock) -> None:
        post(driver, clock, 1, 2, 3)
        post(driver, clock, 4, delay=60)
        claim(driver, clock, limit=2)
        s = driver.stats(P, Q, clock.now_ms())
        assert (s.total, s.claimed, s.free, s.delayed) == (4, 2, 2, 1)
        clock.advance(300)
        s = driver.stats(P, Q, clock.now_ms())
        assert (s.total, s.claimed, s.free, s.delayed) == (4, 0, 4, 0)


# -- reschedule --------------------------------------------------------------------------------


class TestReschedule:
    def test_moves_the_due_time_both_ways(self, driver: Driver, clock: FakeClock) -> None:
        [soon, late] = post(driver, clock, "soon", "late", delay=60)
        now = clock.now_ms()
        driver.edit_message(P, Q, MessageEdit(late, None, due_ms=now + 10_000), now)
        driver.edit_message(P, Q, MessageEdit(soon, None, due_ms=now + 120_000), now)
        clock.advance(ms=9_999)
        assert claim(driver, clock) is None
        clock.advance(ms=1)
        assert bodies_of(claim(driver, clock)) == ["late"]
        clock.advance(110)
        assert bodies_of(claim(driver, clock)) == ["soon"]

    def test_the_due_time_a_message_has_keeps_it_claimable(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        # A repeated "deliver at" edit (a client's retry) must not hold the message back.
        [due, later] = post(driver, clock, "due", "later", delay=0)
        now = clock.now_ms()
        driver.edit_message(P, Q, MessageEdit(due, None, due_ms=now), now)
        driver.edit_message(P, Q, MessageEdit(later, None, due_ms=now + 5000), now)
        driver.edit_message(P, Q, MessageEdit(later, None, due_ms=now + 5000), now)
        assert bodies_of(claim(driver, clock)) == ["due"]
        clock.advance(5)
        held = claim(driver, clock)
        assert bodies_of(held) == ["later"]
        # Given with its claim, the due time it has still takes the message out of the claim.
        assert held is not None
        now = clock.now_ms()
        [m] = driver.get_messages(P, Q, [later], now)
        driver.edit_message(P, Q, MessageEdit(later, held.id, due_ms=m.due_ms), now)
        assert bodies_of(driver.get_claim(P, Q, held.id, now)) == []
        assert bodies_of(claim(driver, clock)) == ["later"]

    def test_claimed_message_needs_its_claim_and_leaves_it(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        [mid] = post(driver, clock, "retry-me")
        held = claim(driver, clock)
        assert held is not None
        now = clock.now_ms()
        with pytest.raises(errors.MessageIsClaimed):
            driver.edit_message(P, Q, MessageEdit(mid, None, due_ms=now + 5000), now)
        with pytest.raises(errors.ClaimNotValid):
            driver.edit_message(P, Q, MessageEdit(mid, "f" * 32, due_ms=now + 5000), now)
        driver.edit_message(P, Q, MessageEdit(mid, held.id, due_ms=now + 5000), now)
        assert bodies_of(driver.get_claim(P, Q, held.id, now)) == []
        [m] = driver.get_messages(P, Q, [mid], now)
        assert (m.claim_id, m.claim_count, m.due_ms) == (None, 1, now + 5000)
        assert claim(driver, clock) is None
        clock.advance(5)
        again = claim(driver, clock)
        assert again is not None and again.messages[0].claim_count == 2

    def test_missing_or_expired(self, driver: Driver, clock: FakeClock) -> None:
        [mid] = post(driver, clock, "short", ttl=60)
        with pytest.raises(errors.MessageDoesNotExist):
            driver.edit_message(
                P, Q, MessageEdit("nope", None, due_ms=clock.now_ms()), clock.now_ms()
            )
        clock.advance(60)
        with pytest.raises(errors.MessageDoesNotExist):
            driver.edit_message(P, Q, MessageEdit(mid, None, due_ms=clock.now_ms()), clock.now_ms())


# -- edit --------------------------------------------------------------------------------------


class TestEdit:
    def test_a_new_body_keeps_the_id_due_time_ttl_and_place(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        [first, second] = post(driver, clock, "first", "second", ttl=600, delay=60)
        [before] = driver.get_messages(P, Q, [second], clock.now_ms())
        clock.advance(10)
        driver.edit_message(
            P, Q, MessageEdit(first, None, body_json='{"edited": 1}'), clock.now_ms()
        )
        [after] = driver.get_messages(P, Q, [first], clock.now_ms())
        assert after.body == {"edited": 1}
        assert (after.due_ms, after.ttl_s, after.expires_ms) == (
            before.due_ms,
            600,
            before.expires_ms,
        )
        clock.advance(49)
        assert claim(driver, clock) is None  # still not due
        clock.advance(1)
        assert bodies_of(claim(driver, clock)) == [{"edited": 1}, "second"]

    def test_due_time_and_ttl_together_with_the_body(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        [mid] = post(driver, clock, "draft", ttl=600, delay=60)
        created = clock.now_ms()
        clock.advance(5)
        now = clock.now_ms()
        edit = MessageEdit(mid, None, body_json='"final"', due_ms=now + 1_000, ttl_s=120)
        driver.edit_message(P, Q, edit, now)
        [m] = driver.get_messages(P, Q, [mid], now)
        assert (m.body, m.due_ms, m.ttl_s, m.expires_ms) == (
            "final",
            now + 1_000,
            120,
            created + 120_000,
        )
        clock.advance(ms=1_000)
        assert bodies_of(claim(driver, clock)) == ["final"]

    def test_a_ttl_that_has_run_out_writes_nothing(self, driver: Driver, clock: FakeClock) -> None:
        [mid] = post(driver, clock, "kept", ttl=600)
        clock.advance(90)
        with pytest.raises(errors.TtlAlreadyLapsed):
            driver.edit_message(
                P, Q, MessageEdit(mid, None, body_json='"lost"', ttl_s=60), clock.now_ms()
            )
        [m] = driver.get_messages(P, Q, [mid], clock.now_ms())
        assert (m.body, m.ttl_s) == ("kept", 600)

    def test_a_shorter_ttl_expires_the_message(self, driver: Driver, clock: FakeClock) -> None:
        [mid] = post(driver, clock, "short-lived", ttl=3600)
        driver.edit_message(P, Q, MessageEdit(mid, None, ttl_s=60), clock.now_ms())
        clock.advance(60)
        assert driver.get_messages(P, Q, [mid], clock.now_ms()) == []
        assert claim(driver, clock) is None

    def test_a_claimed_message_is_edited_only_by_its_claim_which_keeps_it(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        [mid] = post(driver, clock, "held")
        held = claim(driver, clock)
        assert held is not None
        now = clock.now_ms()

        def annotate(claim_id: str | None) -> None:
            driver.edit_message(P, Q, MessageEdit(mid, claim_id, body_json='"annotated"'), now)

        with pytest.raises(errors.MessageIsClaimed):
            annotate(None)
        with pytest.raises(errors.ClaimNotValid):
            annotate("f" * 32)
        [m] = driver.get_messages(P, Q, [mid], now)
        assert m.body == "held"
        annotate(held.id)
        assert bodies_of(driver.get_claim(P, Q, held.id, now)) == ["annotated"]
        [m] = driver.get_messages(P, Q, [mid], now)
        assert (m.claim_id, m.claim_count) == (held.id, 1)

    def test_missing_or_expired(self, driver: Driver, clock: FakeClock) -> None:
        [mid] = post(driver, clock, "short", ttl=60)
        with pytest.raises(errors.MessageDoesNotExist):
            driver.edit_message(P, Q, MessageEdit("nope", None, body_json='"x"'), clock.now_ms())
        clock.advance(60)
        with pytest.raises(errors.MessageDoesNotExist):
            driver.edit_message(P, Q, MessageEdit(mid, None, body_json='"x"'), clock.now_ms())


# -- retry backoff -----------------------------------------------------------------------------


BACKOFF = {"_retry_backoff": {"initial": 2, "factor": 3, "max": 10}}


class TestRetryBackoff:
    def _claimable_after(self, driver: Driver, clock: FakeClock, ms: int) -> Any:
        clock.advance(ms=ms - 1)
        assert claim(driver, clock) is None
        clock.advance(ms=1)
        held = claim(driver, clock)
        assert bodies_of(held) == ["job"]
        return held

    def test_release_and_expiry_back_off_exponentially(
        self, driver: Driver, clock: FakeClock
    ) -> None:
        driver.create_queue(P, Q, BACKOFF, clock.now_ms())
        post(driver, clock, "job")
        first = claim(driver, clock)
        assert first is not None
        driver.release_claim(P, Q, first.id, clock.now_ms())
        # The store's formula is the policy's: 2 * 3^(n-1) s after the claim ends, 10 s at most.
        backoff = QueuePolicy.of(BACKOFF).retry_backoff
        assert backoff is not None
        after_ms = [int(backoff.delay_s(count) * 1000) for count in (1, 2, 3)]
        assert after_ms == [2_000, 6_000, 10_000]
        second = self._claimable_after(driver, clock, after_ms[0])  # after release
        assert second.messages[0].claim_count == 2
        clock.advance(ms=second.expires_ms - clock.now_ms())  # let it run out
        third = self._claimable_after(driver, clock, after_ms[1])  # after expiry
        driver.release_claim(P, Q, third.id, clock.now_ms())
        self._claimable_after(driver, clock, after_ms[2])

    def test_backoff_shows_as_delayed(self, driver: Driver, clock: FakeClock) -> None:
        driver.create_queue(P, Q, BACKOFF, clock.now_ms())
        [mid] = post(driver, clock, "job")
        held = claim(driver, clock)
        assert held is not None
        driver.release_claim(P, Q, held.id, clock.now_ms())
        s = driver.stats(P, Q, clock.now_ms())
        assert (s.delayed, s.next_due_ms) == (1, clock.now_ms() + 2000)
        [m] = driver.get_messages(P, Q, [mid], clock.now_ms())
        assert (m.due_ms, m.claim_id) == (clock.now_ms() + 2000, None)

    def test_with_dead_letter_queue(self, driver: Driver, clock: FakeClock) -> None:
        metadata = {**BACKOFF, "_max_claim_count": 2, "_dead_letter_queue": "dlq"}
        driver.create_queue(P, Q, metadata, clock.now_ms())
        [mid] = post(driver, clock, "job")
        held = claim(driver, clock)
        assert held is not None
        driver.release_claim(P, Q, held.id, clock.now_ms())
        held = self._claimable_after(driver, clock, 2_000)
        driver.release_claim(P, Q, held.id, clock.now_ms())
        clock.advance(6)
        assert claim(driver, clock) is None  # third claim: moved instead of returned
        assert [m.id for m in driver.get_messages(P, "dlq", [mid], clock.now_ms())] == [mid]


# -- listing by due time -----------------------------------------------------------------------


class TestListByDue:
    def _pages(
        self, driver: Driver, clock: FakeClock, limit: int, **kwargs: Any
    ) -> list[list[Any]]:
        pages, marker = [], None
        for _ in range(20):
            result = driver.list_messages_by_due(
                P,
                Q,
                ListQuery(
                    marker=marker,
                    limit=limit,
                    client_id=BOB,
                    echo=kwargs.get("echo", True),
                    include_delayed=kwargs.get("include_delayed", True),
                ),
                clock.now_ms(),
            )
            if not result.messages:
                assert result.next_marker is None
                return pages
            pages.append([m.body for m in result.messages])
            marker = result.next_marker
        raise AssertionError("listing did not end")

    def test_due_order_with_ties_in_posting_order(self, driver: Driver, clock: FakeClock) -> None:
        post(driver, clock, "c", delay=30)
        post(driver, clock, "a1", "a2", "a3", delay=10)
        post(driver, clock, "now")
        post(driver, clock, "b", delay=20)
        assert self._pages(driver, clock, 2) == [["now", "a1"], ["a2", "a3"], ["b", "c"]]

    def test_filters(self, driver: Driver, clock: FakeClock) -> None:
        post(driver, clock, "held", "free")
        post(driver, clock, "later", delay=30)
        post(driver, clock, "expired", ttl=60, delay=90)
        post(driver, clock, "mine", client=BOB)
        claim(driver, clock, limit=1)
        clock.advance(61)
        assert self._pages(driver, clock, 10, include_delayed=False) == [["free", "mine", "later"]]
        assert self._pages(driver, clock, 10, echo=False) == [["free", "later"]]

    def test_lapsed_claims_show_at_redelivery(self, driver: Driver, clock: FakeClock) -> None:
        post(driver, clock, "first", "second")
        claim(driver, clock, limit=1, ttl=60)
        assert self._pages(driver, clock, 10) == [["second"]]
        clock.advance(60)
        assert self._pages(driver, clock, 10) == [["first", "second"]]

    def test_malformed_marker(self, driver: Driver, clock: FakeClock) -> None:
        for marker in ("abc", "12", "12-", "-ab", "1٣-a"):
            with pytest.raises(errors.InvalidParameter):
                driver.list_messages_by_due(
                    P,
                    Q,
                    ListQuery(
                        marker=marker, limit=1, client_id=BOB, echo=True, include_delayed=True
                    ),
                    clock.now_ms(),
                )


# -- waiting claims support --------------------------------------------------------------------


def test_next_claimable_is_the_earliest_due_time_or_claim_expiry(
    driver: Driver, clock: FakeClock
) -> None:
    start = clock.now_ms()
    assert driver.next_claimable_ms(P, Q, start) is None
    post(driver, clock, "ready")
    post(driver, clock, "in-a-minute", delay=60)
    assert driver.next_claimable_ms(P, Q, start) == start + 60_000
    held = claim(driver, clock, ttl=30)
    assert held is not None and bodies_of(held) == ["ready"]
    assert driver.next_claimable_ms(P, Q, start) == start + 30_000
    clock.advance(45)
    assert driver.next_claimable_ms(P, Q, clock.now_ms()) == start + 60_000


def test_writes_wake_announced_queues_only(driver: Driver, clock: FakeClock) -> None:
    if isinstance(driver, PooledDriver):
        wakeups = driver.wakeups_of(P, "watched", "quiet")
    else:
        wakeups = driver.wakeups()
    if wakeups is None:
        pytest.skip("the store has no wake-up channel: waiting claims re-check on their own")
    woken: list[str] = []
    listening, stop = threading.Event(), threading.Event()
    listener = threading.Thread(target=wakeups.listen, args=(woken.append, listening.set, stop))
    listener.start()
    try:
        assert listening.wait(10)
        post(driver, clock, "unheard", queue="quiet")
        wakeups.announce(P, "watched", 10_000)
        post(driver, clock, "heard", queue="watched")
        for _ in range(100):
            if woken:
                break
            stop.wait(0.1)
        # The quiet queue's post came first: had it sent a wake-up, it would be first here.
        assert woken[:1] == [wakeups.channel(P, "watched")]
    finally:
        stop.set()
        listener.join(10)
