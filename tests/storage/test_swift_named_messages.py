"""Messages claimable by their names on Swift: a post writes one object, whose name begins with
its due time, and the messages listing is the due index until a claim or a new due time
indexes the message otherwise."""

from __future__ import annotations

import json
from typing import Any

import pytest

from testbed.swift_aio import SwiftAllInOne
from tests.helpers.stores import close_test_driver, open_test_driver
from tests.helpers.swift import SwiftRequests
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import Batch, ClaimTimes, ListQuery, MessageEdit, NewMessage, Posted
from zaqar_delay.storage.base import metadata_version_of
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.driver import SwiftDriver
from zaqar_delay.storage.swift.messages import MessageOps
from zaqar_delay.storage.swift.slots import Slot
from zaqar_delay.storage.swift.timing import FRONTIER_SLACK_MS

P, Q = "project-n", "named"
ALICE = "a" * 32


def index_entries(swift: SwiftDriver) -> list[str]:
    prefix = names.queue_prefix(P, Q)
    return [
        e["name"][len(prefix) :]
        for e in swift._swift.listing(swift._container(names.INDEX), prefix)
    ]


def listed_fields(swift: SwiftDriver, message_id: str) -> dict[str, str]:
    [entry] = swift._swift.listing(
        swift._container(names.MESSAGES), names.queue_prefix(P, Q) + message_id
    )
    return names.fields_of(entry["content_type"])


def post(swift: SwiftDriver, clock: FakeClock, *bodies: Any, delay_ms: int = 0) -> list[str]:
    messages = [NewMessage(json.dumps(b), 3600, delay_ms) for b in bodies]
    return swift.post_messages(P, Q, messages, ALICE, clock.now_ms()).ids


def claim_bodies(swift: SwiftDriver, clock: FakeClock, limit: int = 10) -> list[Any]:
    claim = swift.create_claim(P, Q, ClaimTimes(300, 60), limit, clock.now_ms())
    return [] if claim is None else [m.body for m in claim.messages]


def test_a_post_to_a_queue_without_subscriptions_is_two_requests(
    swift: SwiftDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the API makes of a post: the queue's metadata read, and the message written,
    named for its due time and claimable by that name; no index entry."""
    clock = FakeClock()
    swift.create_queue(P, Q, {}, clock.now_ms())
    requests = SwiftRequests(monkeypatch)
    posted = swift.post_if_current(
        P,
        Q,
        Batch([NewMessage('"x"', 3600, 5000)], ALICE),
        clock.now_ms(),
        metadata_version_of("{}"),
    )
    assert isinstance(posted, Posted)
    assert requests.made == {"get_object": 1, "put_object": 1}
    [mid] = posted.ids
    assert names.named_ms_of(mid) == clock.now_ms() + 5000
    assert listed_fields(swift, mid)["i"] == "1"
    assert index_entries(swift) == []


def test_ids_are_in_due_order_and_so_is_the_listing(swift: SwiftDriver) -> None:
    clock = FakeClock()
    later = post(swift, clock, "later", delay_ms=20_000)
    sooner = post(swift, clock, "sooner", delay_ms=10_000)
    now = post(swift, clock, "now")
    assert sorted(later + sooner + now) == now + sooner + later
    clock.advance(seconds=10)
    assert claim_bodies(swift, clock) == ["now", "sooner"]
    clock.advance(seconds=10)
    assert claim_bodies(swift, clock) == ["later"]


def test_a_claim_indexes_the_message_and_it_is_claimable_by_its_name_no_more(
    swift: SwiftDriver,
) -> None:
    clock = FakeClock()
    [mid] = post(swift, clock, "x")
    claim = swift.create_claim(P, Q, ClaimTimes(60, 60), 10, clock.now_ms())
    assert claim is not None and [m.id for m in claim.messages] == [mid]
    assert "i" not in listed_fields(swift, mid)
    assert [e.split("/")[0] for e in index_entries(swift)] == ["c"]
    clock.advance(seconds=60)
    # The lapsed claim gives it back through a due entry of the index.
    again = swift.create_claim(P, Q, ClaimTimes(60, 60), 10, clock.now_ms())
    assert again is not None and [(m.id, m.claim_count) for m in again.messages] == [(mid, 2)]


def test_a_new_due_time_indexes_the_message_and_an_edit_of_its_body_keeps_its_name(
    swift: SwiftDriver,
) -> None:
    clock = FakeClock()
    [kept, moved] = post(swift, clock, "kept", "moved", delay_ms=30_000)
    swift.edit_message(P, Q, MessageEdit(kept, None, body_json='"kept, edited"'), clock.now_ms())
    assert listed_fields(swift, kept)["i"] == "1"
    sooner = clock.now_ms() + 10_000
    swift.edit_message(P, Q, MessageEdit(moved, None, due_ms=sooner), clock.now_ms())
    assert "i" not in listed_fields(swift, moved)
    assert index_entries(swift) == [f"d/{names.time_part(sooner)}/{moved}"]
    clock.advance(seconds=10)
    assert claim_bodies(swift, clock) == ["moved"]
    clock.advance(seconds=20)
    assert claim_bodies(swift, clock) == ["kept, edited"]


def test_messages_stored_by_an_earlier_release_are_claimed_by_their_due_entries(
    swift: SwiftDriver,
) -> None:
    """Earlier releases named messages for their creation and indexed each by a due entry."""
    clock = FakeClock()
    created = clock.now_ms()
    [mid] = names.new_ids([created])
    doc = MessageOps._document(NewMessage('"old"', 3600, 20_000), ALICE, created)
    swift._write_due_entry(P, Q, mid, doc, Slot())
    swift._write_message(P, Q, mid, doc)
    assert "i" not in listed_fields(swift, mid)
    stats = swift.stats(P, Q, clock.now_ms())
    assert (stats.total, stats.delayed, stats.next_due_ms) == (1, 1, created + 20_000)
    clock.advance(ms=19_999)
    assert claim_bodies(swift, clock) == []
    clock.advance(ms=1)
    assert claim_bodies(swift, clock) == ["old"]


def test_stats_count_delayed_messages_claimable_by_their_names(swift: SwiftDriver) -> None:
    clock = FakeClock()
    first = clock.now_ms()
    post(swift, clock, "due")
    clock.advance(seconds=1)
    post(swift, clock, "in 20 s", delay_ms=20_000)
    post(swift, clock, "in 10 s", delay_ms=10_000)
    stats = swift.stats(P, Q, clock.now_ms())
    assert (stats.total, stats.delayed, stats.next_due_ms) == (3, 2, clock.now_ms() + 10_000)
    # Oldest and newest by creation, not by name (due) order.
    assert stats.oldest is not None and stats.oldest.created_ms == first
    assert stats.newest is not None and stats.newest.created_ms == clock.now_ms()
    assert [m.body for m in swift.get_messages(P, Q, [stats.newest.id], clock.now_ms())] == [
        "in 10 s"
    ]


def test_claims_pass_over_more_claimed_messages_than_they_may_list_once_they_are_old(
    swift_aio: SwiftAllInOne,
) -> None:
    """Messages claimed and not deleted stay at the front of the listing. A claim lists at
    most its scan budget per round; the front of messages posted over a minute ago and no
    longer claimable by their names is remembered, and listings start there."""
    driver = open_test_driver(swift_aio.store_uri, list_scan_budget=10)
    assert isinstance(driver, SwiftDriver)
    clock = FakeClock()
    try:
        ids = post(driver, clock, *range(60))
        clock.advance(ms=FRONTIER_SLACK_MS + 1)
        claimed: list[Any] = []
        for _ in range(6):
            # Without the remembered front, the sixth claim lists 50 claimed messages in its
            # five rounds of ten and finds nothing.
            claimed += claim_bodies(driver, clock)
        assert claimed == list(range(60))
        front = driver._named_frontiers.get(names.queue_prefix(P, Q))
        assert front == names.queue_prefix(P, Q) + ids[49], "the front moved past 50 of them"
        post(driver, clock, "new")
        assert claim_bodies(driver, clock) == ["new"]
    finally:
        close_test_driver(driver)


def test_the_front_stays_where_messages_may_still_be_posted(swift_aio: SwiftAllInOne) -> None:
    """Messages named less than FRONTIER_SLACK_MS ago may be followed by a post from a
    process whose clock is behind, named before them: the front never passes them."""
    driver = open_test_driver(swift_aio.store_uri, list_scan_budget=10)
    assert isinstance(driver, SwiftDriver)
    clock = FakeClock()
    start = clock.now_ms()
    try:
        older = post(driver, clock, *range(5))
        clock.advance(seconds=10)
        post(driver, clock, *range(5, 10))
        assert claim_bodies(driver, clock) == list(range(10))
        clock.advance(ms=FRONTIER_SLACK_MS - 10_000 + 1)  # the older five named a minute ago
        assert claim_bodies(driver, clock) == []
        prefix = names.queue_prefix(P, Q)
        assert driver._named_frontiers.get(prefix) == prefix + older[-1]
        # A process whose clock is behind by less than the slack names its message after
        # the older five and before the newer ones: it is found.
        behind = FakeClock(clock.now_ms() - FRONTIER_SLACK_MS + 2)
        [mid] = post(driver, behind, "from behind")
        assert start < names.named_ms_of(mid) < start + 10_000
        assert claim_bodies(driver, clock) == ["from behind"]
    finally:
        close_test_driver(driver)


def test_due_order_pages_merge_named_and_rescheduled_messages(swift: SwiftDriver) -> None:
    """A page's marker may name a rescheduled message, whose id tells another time than its
    due time, on either side of it."""
    clock = FakeClock()
    now = clock.now_ms()
    [a] = post(swift, clock, "a", delay_ms=10_000)
    post(swift, clock, "b", delay_ms=20_000)
    [c] = post(swift, clock, "c", delay_ms=30_000)
    swift.edit_message(P, Q, MessageEdit(c, None, due_ms=now + 15_000), now)
    swift.edit_message(P, Q, MessageEdit(a, None, due_ms=now + 25_000), now)
    pages, marker = [], None
    for _ in range(5):
        page = swift.list_messages_by_due(
            P,
            Q,
            ListQuery(marker=marker, limit=1, client_id=ALICE, echo=True, include_delayed=True),
            now,
        )
        pages.append([m.body for m in page.messages])
        if page.next_marker is None:
            break
        marker = page.next_marker
    assert pages == [["c"], ["b"], ["a"], []]
