"""The Swift driver's reads of objects that should be there, when a read answers 404.

A GET that races an overwrite of its object may answer 404 (the object server lists the
object's files, then opens the newest, which the overwrite has just replaced):
``test_swift_specific.py`` shows it on the all-in-one. Here that answer is injected, once, into
the first GET of one object, so each read that must not believe it is checked on its own:
each test first asserts that the 404 was given, then that nothing was lost, handed out twice
or dropped. One read is given instead the body of a creation that a concurrent one overwrote
after it: a reader of a generation whose creations are not all committed.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any

import pytest
from swiftclient.exceptions import ClientException

from zaqar_delay import errors
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import (
    Batch,
    ClaimTimes,
    LeaseRequest,
    ListQuery,
    MessageEdit,
    NewMessage,
    NewSubscription,
    Posted,
    Settlement,
)
from zaqar_delay.storage.base import metadata_version_of
from zaqar_delay.storage.bounds import CLOCK_DISAGREEMENT_MS
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.connect import SwiftClient
from zaqar_delay.storage.swift.driver import SwiftDriver
from zaqar_delay.storage.swift.slots import Slot
from zaqar_delay.storage.swift.timing import ORPHAN_GRACE_MS

P, Q = "project-r", "jobs"
ALICE = "a" * 32
SUBSCRIBER = "http://127.0.0.1:9/x"


class RacedReads:
    """The next GET of each object named here answers 404, as a GET racing an overwrite of it
    may; ``given`` lists the objects it was given for."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pending: set[str] = set()
        self.given: list[str] = []
        lock = threading.Lock()
        call = SwiftClient._call

        def raced(client: SwiftClient, method: str, *args: Any, **kwargs: Any) -> Any:
            if method == "get_object":
                with lock:
                    hit = args[1] in self.pending
                    if hit:
                        self.pending.discard(args[1])
                        self.given.append(args[1])
                if hit:
                    raise ClientException("raced an overwrite", http_status=404)
            return call(client, method, *args, **kwargs)

        monkeypatch.setattr(SwiftClient, "_call", raced)

    def next_read(self, *objects: str) -> None:
        self.pending.update(objects)


@pytest.fixture
def raced(monkeypatch: pytest.MonkeyPatch) -> RacedReads:
    return RacedReads(monkeypatch)


def post(swift: SwiftDriver, clock: FakeClock, ttl_s: int = 3600) -> str:
    [mid] = swift.post_messages(P, Q, [NewMessage('"x"', ttl_s, 0)], ALICE, clock.now_ms()).ids
    return mid


def claim(swift: SwiftDriver, clock: FakeClock, ttl_s: int = 30) -> list[str]:
    """The ids of the messages a new claim takes (none: [])."""
    made = swift.create_claim(P, Q, ClaimTimes(ttl_s, 60), 10, clock.now_ms())
    return [] if made is None else [m.id for m in made.messages]


def message_object(swift: SwiftDriver, mid: str) -> str:
    return swift._message_name(P, Q, mid)


def slot_object(swift: SwiftDriver, mid: str, n: int) -> str:
    return swift._slot_name(P, Q, mid, n)


@pytest.mark.parametrize("reader", ["get_metadata", "post_if_current"])
def test_a_queue_whose_metadata_is_read_as_missing_is_read_with_it(
    swift: SwiftDriver, raced: RacedReads, reader: str
) -> None:
    """Read as missing while a metadata write overwrote it, a queue's metadata was none: a
    post went by no metadata, without the queue's default delay, so due too early (the
    service reads the metadata, and the post checks it is still the one read)."""
    clock = FakeClock()
    swift.create_queue(P, Q, {"_default_message_delay": 60}, clock.now_ms())
    queue_object = names.queue_object(P, Q)
    text = swift._metadata_text(P, Q)
    assert text is not None
    raced.next_read(queue_object)
    if reader == "get_metadata":
        assert swift.get_metadata(P, Q) == {"_default_message_delay": 60}
    else:
        swift._recent_queue_objects.forget(queue_object)  # read by the post, not remembered
        batch = Batch([NewMessage('"x"', 3600, 60_000)], ALICE)
        posted = swift.post_if_current(P, Q, batch, clock.now_ms(), metadata_version_of(text))
        assert isinstance(posted, Posted)
    assert raced.given == [queue_object]


@pytest.mark.parametrize("named", ["get", "delete", "claim"])
def test_a_message_or_claim_a_client_names_is_found_when_read_as_missing(
    swift: SwiftDriver, raced: RacedReads, named: str
) -> None:
    """An edit or a release overwrites a message, a renewal its claim. Read as missing, a
    get by id left it out, a delete left it (delivered again), a claim's holder was told
    its claim had ended."""
    clock = FakeClock()
    mid = post(swift, clock)
    if named == "get":
        raced.next_read(message_object(swift, mid))
        assert [m.id for m in swift.get_messages(P, Q, [mid], clock.now_ms())] == [mid]
    elif named == "delete":
        raced.next_read(message_object(swift, mid))
        swift.delete_message(P, Q, mid, None, clock.now_ms())
        assert swift.get_messages(P, Q, [mid], clock.now_ms()) == []
    else:
        made = swift.create_claim(P, Q, ClaimTimes(60, 60), 10, clock.now_ms())
        assert made is not None
        raced.next_read(swift._claim_name(P, Q, made.id))
        held = swift.get_claim(P, Q, made.id, clock.now_ms())
        assert [m.id for m in held.messages] == [mid]
    assert len(raced.given) == 1


def test_a_claim_s_renewed_slot_read_as_missing_does_not_hand_its_message_out(
    swift: SwiftDriver, raced: RacedReads
) -> None:
    """A renewal writes the new claimed entry, then deletes the old one; a claimer returning
    the old entry as lapsed reads the slot to see the claim renewed. Read as missing, the
    message was handed to a second claim while the first held it."""
    clock = FakeClock()
    mid = post(swift, clock)
    assert claim(swift, clock) == [mid]
    slot = swift._read_slot(P, Q, mid, 1)
    doc = swift._read_message(P, Q, mid)
    assert slot is not None and doc is not None and slot.live(clock.now_ms())
    # The renewal's old entry, not yet deleted: it says the claim ended 10 s after it began.
    ended = dataclasses.replace(slot, expires_ms=clock.now_ms() + 10_000)
    swift._write_claimed_entry(P, Q, mid, doc, ended)
    clock.advance(ms=11_000)
    raced.next_read(slot_object(swift, mid, 1))
    assert claim(swift, clock) == []
    assert raced.given == [slot_object(swift, mid, 1)]


@pytest.mark.parametrize("missing", ["slot", "message"])
def test_a_renewal_that_reads_its_slot_or_message_as_missing_still_extends_it(
    swift: SwiftDriver, raced: RacedReads, missing: str
) -> None:
    """Read as missing, the message was left out of the renewal, and handed out again when
    the claim's first ttl ran out, while its holder believed it held it."""
    clock = FakeClock()
    mid = post(swift, clock)
    made = swift.create_claim(P, Q, ClaimTimes(30, 60), 10, clock.now_ms())
    assert made is not None and [m.id for m in made.messages] == [mid]
    clock.advance(ms=10_000)
    read = slot_object(swift, mid, 1) if missing == "slot" else message_object(swift, mid)
    raced.next_read(read)
    swift.renew_claim(P, Q, made.id, 120, 60, clock.now_ms())
    assert raced.given == [read]
    clock.advance(ms=30_000)  # past the claim's first ttl, within the renewed one
    assert claim(swift, clock) == []
    held = swift.get_claim(P, Q, made.id, clock.now_ms())
    assert [m.id for m in held.messages] == [mid]


def test_a_due_message_read_as_missing_by_its_claimer_is_taken_not_unindexed(
    swift: SwiftDriver, raced: RacedReads
) -> None:
    """Past its post's orphan grace, a message read as missing was taken for gone: its due
    entry went, and the message stayed, never claimed again."""
    clock = FakeClock()
    mid = post(swift, clock)
    clock.advance(ms=ORPHAN_GRACE_MS + CLOCK_DISAGREEMENT_MS + 1000)
    raced.next_read(message_object(swift, mid))
    assert claim(swift, clock) == [mid]
    assert raced.given == [message_object(swift, mid)]


def test_a_message_read_as_missing_by_a_claimer_that_lost_its_slot_stays(
    swift: SwiftDriver, raced: RacedReads
) -> None:
    """A claimer that lost the slot to a taker long dead reads the message to repair its
    index. Read as missing past the post's orphan grace, a message claimable by its name
    was deleted."""
    clock = FakeClock()
    mid = post(swift, clock)
    assert swift._take_slot(P, Q, mid, Slot(1, 1, "d" * 32, clock.now_ms() + 30_000))
    clock.advance(ms=ORPHAN_GRACE_MS + CLOCK_DISAGREEMENT_MS + 1000)
    raced.next_read(message_object(swift, mid), slot_object(swift, mid, 1))
    assert claim(swift, clock) == [mid]
    assert sorted(raced.given) == sorted([message_object(swift, mid), slot_object(swift, mid, 1)])


def test_a_message_whose_ttl_an_edit_extends_is_not_removed_as_expired_when_read_as_missing(
    swift: SwiftDriver, raced: RacedReads
) -> None:
    """An edit that extends the ttl writes the message, then its entry: a claimer meeting the
    entry in between, listed as expired, reads the message to see. Read as missing, the
    message was removed."""
    clock = FakeClock()
    mid = post(swift, clock, ttl_s=60)
    # Claimed and released: indexed by a due entry, which carries the expiry.
    made = swift.create_claim(P, Q, ClaimTimes(30, 0), 10, clock.now_ms())
    assert made is not None
    swift.release_claim(P, Q, made.id, clock.now_ms())
    doc = swift._read_message(P, Q, mid)
    assert doc is not None and not doc["i"]
    # The edit, stopped between the message and its entry.
    swift._write_message(P, Q, mid, {**doc, "t": 3600, "e": clock.now_ms() + 3_600_000})
    clock.advance(ms=61_000)
    raced.next_read(message_object(swift, mid))
    assert claim(swift, clock) == []  # its entry still says expired
    assert raced.given == [message_object(swift, mid)]
    assert [m.id for m in swift.get_messages(P, Q, [mid], clock.now_ms())] == [mid]


def test_an_edit_of_a_message_read_as_missing_is_applied(
    swift: SwiftDriver, raced: RacedReads
) -> None:
    clock = FakeClock()
    mid = post(swift, clock)
    raced.next_read(message_object(swift, mid))
    swift.edit_message(P, Q, MessageEdit(mid, None, body_json='"y"'), clock.now_ms())
    assert raced.given == [message_object(swift, mid)]
    [message] = swift.get_messages(P, Q, [mid], clock.now_ms())
    assert message.body == "y"


def test_a_listing_by_due_time_lists_a_message_read_as_missing(
    swift: SwiftDriver, raced: RacedReads
) -> None:
    """Left out of a page, a message was skipped by a client paging on: the next marker is
    the page's last message."""
    clock = FakeClock()
    first, second = post(swift, clock), post(swift, clock)
    raced.next_read(message_object(swift, first))
    page = swift.list_messages_by_due(P, Q, ListQuery(None, 10, ALICE, echo=True), clock.now_ms())
    assert raced.given == [message_object(swift, first)]
    assert [m.id for m in page.messages] == [first, second]


@pytest.mark.parametrize("missing", ["message", "subscription"])
def test_a_push_whose_message_or_subscription_is_read_as_missing_is_leased(
    swift: SwiftDriver, raced: RacedReads, missing: str
) -> None:
    """Every push's result overwrites its subscription, and a claim or an edit its message.
    Read as missing, the push was dropped: never sent."""
    clock = FakeClock()
    sid, _ = swift.create_subscription(
        P, Q, NewSubscription(SUBSCRIBER, 3600, {}, "s"), clock.now_ms()
    )
    mid = post(swift, clock)
    if missing == "message":
        read = message_object(swift, mid)
    else:
        read = swift._subscription_name(P, Q, sid)
    raced.next_read(read)
    leased = swift.lease_pushes(P, Q, LeaseRequest(clock.now_ms(), 30_000, 10))
    assert raced.given == [read]
    assert [d.message.id for d in leased] == [mid]


def test_a_message_consumed_by_its_push_and_read_as_missing_is_deleted(
    swift: SwiftDriver, raced: RacedReads
) -> None:
    """A queue with ``_delete_after_push``: read as missing, the pushed message stayed, and
    was delivered again to its consumers."""
    clock = FakeClock()
    swift.create_subscription(P, Q, NewSubscription(SUBSCRIBER, 3600, {}, "s"), clock.now_ms())
    mid = post(swift, clock)
    [delivery] = swift.lease_pushes(P, Q, LeaseRequest(clock.now_ms(), 30_000, 10))
    raced.next_read(message_object(swift, mid))
    consumed = swift.settle_pushes(
        P, Q, Settlement([(delivery, None)], [delivery.id]), clock.now_ms()
    )
    assert raced.given == [message_object(swift, mid)]
    assert consumed == [mid]
    assert swift.get_messages(P, Q, [mid], clock.now_ms()) == []


def test_a_subscriber_whose_holder_is_read_as_missing_is_not_subscribed_twice(
    swift: SwiftDriver, raced: RacedReads
) -> None:
    """The object naming the subscription that holds a subscriber: read as missing, a second
    subscription of the same subscriber was made."""
    clock = FakeClock()
    new = NewSubscription(SUBSCRIBER, 3600, {}, "s")
    sid, created = swift.create_subscription(P, Q, new, clock.now_ms())
    assert created
    holder = swift._holders_prefix(P, Q, SUBSCRIBER) + names.number_part(1)
    raced.next_read(holder)
    assert swift.create_subscription(P, Q, new, clock.now_ms()) == (sid, False)
    assert raced.given == [holder]


def test_a_subscriber_s_holder_read_before_a_concurrent_creation_overwrote_it_is_not_named(
    swift: SwiftDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Concurrent creations of one holder generation all succeed, and Swift keeps the one
    committed last: a third creation of the same subscriber that read the generation between
    two commits read a losing creation's subscription, live until its creator learns it lost
    and deletes it, and answered its id (a subscription that is then gone)."""
    clock = FakeClock()
    new = NewSubscription(SUBSCRIBER, 3600, {}, "s")
    kept, created = swift.create_subscription(P, Q, new, clock.now_ms())
    assert created
    lost = "0" * 24
    doc = {"u": SUBSCRIBER, "t": 3600, "o": {}, "st": 0, "e": clock.now_ms() + 3_600_000}
    swift._write_subscription(P, Q, lost, {**doc, "c": False, "sk": "s"})
    holder = swift._holders_prefix(P, Q, SUBSCRIBER) + names.number_part(1)
    read_early: list[str] = []
    call = SwiftClient._call

    def before_the_last_commit(client: SwiftClient, method: str, *args: Any, **kw: Any) -> Any:
        answer = call(client, method, *args, **kw)
        if method == "get_object" and args[1] == holder and not read_early:
            read_early.append(args[1])
            return answer[0], json.dumps({"s": lost, "k": "early"}).encode()
        return answer

    monkeypatch.setattr(SwiftClient, "_call", before_the_last_commit)
    answered = swift.create_subscription(P, Q, new, clock.now_ms())
    assert read_early == [holder]
    assert answered == (kept, False)


class PostDied(BaseException):
    """The posting process died (here: before it confirmed the post's dedup ids)."""


def test_a_repeat_that_reads_the_first_post_s_message_as_missing_is_its_duplicate(
    swift: SwiftDriver, raced: RacedReads, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first post stored its message and died before confirming; its repeat, once the
    first post's time is up, reads the message to complete it. Read as missing, the message
    was stored twice."""
    clock = FakeClock()
    messages = [NewMessage('"once"', 3600, 0, "job-1")]

    def died(*_: Any) -> None:
        raise PostDied

    with monkeypatch.context() as patched:
        patched.setattr(swift._dedup, "confirm", died)
        with pytest.raises(PostDied):
            swift.post_messages(P, Q, messages, ALICE, clock.now_ms())
    [first] = [
        m.id
        for m in swift.list_messages_by_due(
            P, Q, ListQuery(None, 10, ALICE, echo=True), clock.now_ms()
        ).messages
    ]
    clock.advance(ms=swift._dedup.dead_after_ms)
    raced.next_read(message_object(swift, first))
    repeat = swift.post_messages(P, Q, messages, ALICE, clock.now_ms())
    assert raced.given == [message_object(swift, first)]
    assert (repeat.ids, repeat.duplicates) == ([first], (0,))
    assert swift.stats(P, Q, clock.now_ms()).total == 1


def test_a_get_or_edit_of_a_message_that_is_gone_still_answers_it_is_gone(
    swift: SwiftDriver,
) -> None:
    """The reads above are read again on a 404; a message really gone is still gone."""
    clock = FakeClock()
    mid = post(swift, clock)
    swift.delete_message(P, Q, mid, None, clock.now_ms())
    assert swift.get_messages(P, Q, [mid], clock.now_ms()) == []
    with pytest.raises(errors.MessageDoesNotExist):
        swift.edit_message(P, Q, MessageEdit(mid, None, body_json='"y"'), clock.now_ms())
