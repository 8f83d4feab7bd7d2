"""Reserving dedup ids (``storage.dedup_reservation``) on the stores that run it in Python,
MongoDB and Swift, through their records: repeats wait for a first post still being stored,
posts wait only in id order, and a first post that died before confirming is completed."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from tests.helpers.dedup_stalls import Stall, after_reserving
from tests.helpers.stores import close_test_driver, every_message, open_test_driver, store_url
from zaqar_delay import errors
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import NewMessage, Posted
from zaqar_delay.storage import dedup_reservation
from zaqar_delay.storage.bounds import FIRST_POST_GRACE_MS
from zaqar_delay.storage.dedup_reservation import (
    REMEMBERED_CHUNK,
    DedupRecord,
    DedupReservation,
)
from zaqar_delay.storage.swift.dedup import SwiftDedupRecords
from zaqar_delay.storage.swift.driver import SwiftDriver

P, Q = "p", "q"
ALICE = "a" * 32


class ProcessKilled(BaseException):
    """The process dying mid-call: nothing after the call runs, not even an undo."""


def queue_on(request: pytest.FixtureRequest, store: str) -> Iterator[Any]:
    """A driver of ``store`` with the queue Q, closed after the test."""
    opened = open_test_driver(store_url(request, store))
    opened.create_queue(P, Q, {}, FakeClock().now_ms())
    yield opened
    close_test_driver(opened)


@pytest.fixture(params=["mongodb", "swift"])
def driver(request: pytest.FixtureRequest) -> Iterator[Any]:
    yield from queue_on(request, request.param)


@pytest.fixture
def mongodb(request: pytest.FixtureRequest) -> Iterator[Any]:
    yield from queue_on(request, "mongodb")


def reservation(driver: Any) -> DedupReservation:
    reserving = driver._dedup
    assert isinstance(reserving, DedupReservation)
    return reserving


def confirming_after(
    patched: pytest.MonkeyPatch, driver: Any, meanwhile: Callable[[], None]
) -> None:
    """The first post to confirm its dedup ids (stored whole) runs ``meanwhile`` first: until
    then its records are unconfirmed, as while it stores its messages."""
    reserving = reservation(driver)
    confirm = reserving.confirm
    stalled: list[bool] = []

    def confirm_later(project: str, queue: str, taken: Sequence[DedupRecord]) -> None:
        if not stalled:
            stalled.append(True)
            meanwhile()
        confirm(project, queue, taken)

    patched.setattr(reserving, "confirm", confirm_later)


@contextlib.contextmanager
def first_post_stalled(
    patched: pytest.MonkeyPatch,
    driver: Any,
    clock: FakeClock,
    results: dict[str, Posted],
    dedup_id: str,
) -> Iterator[None]:
    """A post of ``dedup_id`` (``results["first"]``), in a thread of its own, stalled once it
    has reserved the id, before it stores its message; it goes on when the block ends."""
    stall = Stall()
    after_reserving(patched, driver, {"first": stall})
    first = posting(driver, clock, results, "first", dedup_id)
    try:
        assert stall.reserved.wait(10), "the first post reserved its id"
        yield
    finally:
        stall.go.set()
        first.join(10)


def posting(
    driver: Any, clock: FakeClock, results: dict[str, Posted], name: str, *dedup_ids: str
) -> threading.Thread:
    """A post of one message per dedup id, in a thread of its own; its result in ``results``."""
    messages = [NewMessage(f'"{name}-{i}"', 3600, 0, i) for i in dedup_ids]
    thread = threading.Thread(
        target=lambda: results.update(
            {name: driver.post_messages(P, Q, messages, ALICE, clock.now_ms())}
        ),
        name=name,
    )
    thread.start()
    return thread


def stored_once(
    driver: Any, results: dict[str, Posted], repeat: str, first: str, now_ms: int
) -> None:
    """The post ``repeat`` was answered with the message of the post ``first``, stored once."""
    assert (results[repeat].ids, results[repeat].duplicates) == (results[first].ids, (0,))
    assert driver.stats(P, Q, now_ms).total == 1


def test_a_repeat_while_the_first_post_is_being_stored_waits_for_it(
    driver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    results: dict[str, Posted] = {}
    repeats: list[threading.Thread] = []

    def repeated_meanwhile() -> None:
        repeats.append(posting(driver, clock, results, "repeat", "job"))
        time.sleep(0.5)  # the repeat has read the unconfirmed record, and waits
        assert repeats[0].is_alive(), "the repeat did not wait for the first post"

    confirming_after(monkeypatch, driver, repeated_meanwhile)
    first = driver.post_messages(
        P, Q, [NewMessage('"once"', 3600, 0, "job")], ALICE, clock.now_ms()
    )
    repeats[0].join(15)
    assert (results["repeat"].ids, results["repeat"].duplicates) == (first.ids, (0,))
    assert driver.stats(P, Q, clock.now_ms()).total == 1


def test_a_repeat_whose_clock_runs_ahead_of_the_first_posts_still_waits_for_it(
    driver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repeat's clock reads the first post's record as older than the grace while that
    post has not stored its message yet: the repeat waits for it on its own watch, and the
    message is stored once."""
    first_clock = FakeClock()
    ahead = FakeClock(first_clock.now_ms() + FIRST_POST_GRACE_MS + 1000)
    results: dict[str, Posted] = {}
    with first_post_stalled(monkeypatch, driver, first_clock, results, "job"):
        record = reservation(driver)._records.latest(P, Q, "job")
        assert record is not None and not record.stored
        assert ahead.now_ms() - record.at_ms > FIRST_POST_GRACE_MS, "read past the grace"
        assert every_message(driver, P, Q, ahead.now_ms()) == [], "nothing is stored yet"
        repeat = posting(driver, ahead, results, "repeat", "job")
        repeat.join(1)
        assert repeat.is_alive(), "the repeat took the first post for dead"
    repeat.join(15)
    stored_once(driver, results, "repeat", "first", ahead.now_ms())


def test_a_repeat_waiting_on_a_record_another_repeat_took_over_waits_for_that_post(
    mongodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first post died after reserving its id. A repeat waits out its grace; meanwhile
    another, whose clock reads the record past it, takes the record over (MongoDB rewrites it
    in place) and is storing its message. The waiting repeat gives that post a grace of its
    own instead of taking the record from it: the message is stored once."""
    start = FakeClock()
    post = [NewMessage('"once"', 3600, 0, "job")]
    results: dict[str, Posted] = {}
    waiting, stall = threading.Event(), Stall()

    def killed() -> None:
        raise ProcessKilled

    after_reserving(monkeypatch, mongodb, {"MainThread": killed, "taker": stall})
    with pytest.raises(ProcessKilled):
        mongodb.post_messages(P, Q, post, ALICE, start.now_ms())
    assert every_message(mongodb, P, Q, start.now_ms()) == [], "the first post stored nothing"
    records = reservation(mongodb)._records
    reread = records.reread

    def watched(project: str, queue: str, record: DedupRecord) -> DedupRecord | None:
        if threading.current_thread().name == "waiter":
            waiting.set()
        return reread(project, queue, record)

    monkeypatch.setattr(records, "reread", watched)
    waiter_clock = FakeClock(start.now_ms() + reservation(mongodb).dead_after_ms - 2000)
    taker_clock = FakeClock(start.now_ms() + reservation(mongodb).dead_after_ms + 1000)
    waiter = posting(mongodb, waiter_clock, results, "waiter", "job")
    try:
        assert waiting.wait(10), "the repeat waits for the first post"
        taker = posting(mongodb, taker_clock, results, "taker", "job")
        assert stall.reserved.wait(10)
        latest = records.latest(P, Q, "job")
        assert latest is not None and not latest.stored
        assert waiter.is_alive(), "the record changed hands while the repeat waited"
        waiter.join(3)  # past what is left of the first post's grace for the waiter
        assert waiter.is_alive(), "the waiting repeat took the record from the taker"
    finally:
        stall.go.set()
        waiter.join(15)
    taker.join(10)
    stored_once(mongodb, results, "waiter", "taker", start.now_ms())


def test_a_post_of_several_ids_refused_while_waiting_gives_back_the_ids_it_took(
    driver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A post of ids a and b waits for b, which a stalled post is storing, past the time a
    request waits: it is refused (503), and a, which it took, is given back rather than held
    unconfirmed for a repeat of a to wait on."""
    monkeypatch.setattr(dedup_reservation, "FIRST_POST_WAIT_MS", 300)
    clock = FakeClock()
    results: dict[str, Posted] = {}
    with first_post_stalled(monkeypatch, driver, clock, results, "b"):
        both = [NewMessage('"a"', 3600, 0, "a"), NewMessage('"b"', 3600, 0, "b")]
        with pytest.raises(errors.FirstPostPending):
            driver.post_messages(P, Q, both, ALICE, clock.now_ms())
        alone = driver.post_messages(P, Q, [NewMessage('"a"', 3600, 0, "a")], ALICE, clock.now_ms())
        assert alone.duplicates == ()
    assert driver.stats(P, Q, clock.now_ms()).total == 2


def test_an_id_whose_first_post_is_being_stored_is_not_yet_remembered_as_stored(
    driver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What lets a repeat through at a project's message limit: only a stored first post."""
    clock = FakeClock()
    seen: list[bool] = []
    confirming_after(
        monkeypatch,
        driver,
        lambda: seen.append(driver.remembers_dedup_ids(P, Q, ["job"], clock.now_ms())),
    )
    driver.post_messages(P, Q, [NewMessage('"once"', 3600, 0, "job")], ALICE, clock.now_ms())
    assert seen == [False]
    assert driver.remembers_dedup_ids(P, Q, ["job"], clock.now_ms())


def test_asking_about_fresh_ids_stops_after_one_chunk_of_reads(
    driver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    driver.post_messages(P, Q, [NewMessage('"once"', 3600, 0, "job")], ALICE, clock.now_ms())
    records = reservation(driver)._records
    latest, read = records.latest, []

    def counted(project: str, queue: str, dedup_id: str) -> Any:
        read.append(dedup_id)
        return latest(project, queue, dedup_id)

    monkeypatch.setattr(records, "latest", counted)
    fresh = [f"fresh-{n}" for n in range(10 * REMEMBERED_CHUNK)]
    assert not driver.remembers_dedup_ids(P, Q, ["job", *fresh], clock.now_ms())
    assert len(read) <= REMEMBERED_CHUNK
    read.clear()
    assert driver.remembers_dedup_ids(P, Q, ["job"] * 3, clock.now_ms())
    assert read == ["job"]


def test_a_post_of_several_ids_waits_holding_only_ids_ordered_before_the_awaited_one(
    driver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A post of ids b and a meets a being stored by another post: it gives b back and waits
    for a, so a post of b alone is not kept waiting on it."""
    clock = FakeClock()
    results: dict[str, Posted] = {}
    both: list[threading.Thread] = []

    def others_meanwhile() -> None:
        both.append(posting(driver, clock, results, "both", "b", "a"))
        time.sleep(0.5)  # "both" met a unconfirmed, and waits for it
        assert both[0].is_alive(), "the post of both ids did not wait for a"
        alone = posting(driver, clock, results, "alone", "b")
        alone.join(10)
        assert not alone.is_alive(), "a post of b alone waited on the post that waits for a"

    confirming_after(monkeypatch, driver, others_meanwhile)
    first = driver.post_messages(
        P, Q, [NewMessage('"first-a"', 3600, 0, "a")], ALICE, clock.now_ms()
    )
    both[0].join(15)
    assert results["alone"].duplicates == ()
    assert results["both"].ids == [results["alone"].ids[0], first.ids[0]]
    assert results["both"].duplicates == (0, 1)
    assert driver.stats(P, Q, clock.now_ms()).total == 2


def test_a_first_post_that_died_before_confirming_is_completed_by_a_repeat(
    driver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first post stored its message and died before confirming its dedup id. Within its
    grace a repeat would wait for it; past it, the repeat finds the message stored, confirms
    the record, and is its duplicate: the message is not posted twice."""
    clock = FakeClock()
    post = [NewMessage('"once"', 3600, 0, "job")]

    def killed() -> None:
        raise ProcessKilled

    with monkeypatch.context() as patched:
        confirming_after(patched, driver, killed)
        with pytest.raises(ProcessKilled):
            driver.post_messages(P, Q, post, ALICE, clock.now_ms())
    [stored] = every_message(driver, P, Q, clock.now_ms())
    assert stored.body == "once", "the first post stored its message"

    clock.advance(ms=reservation(driver).dead_after_ms)
    confirmed: list[Sequence[DedupRecord]] = []
    records = reservation(driver)._records
    confirm = records.confirm
    monkeypatch.setattr(
        records, "confirm", lambda p, q, taken: (confirmed.append(taken), confirm(p, q, taken))
    )
    repeat = driver.post_messages(P, Q, post, ALICE, clock.now_ms())
    assert (repeat.ids, repeat.duplicates) == ([stored.id], (0,))
    assert [r.message_id for taken in confirmed for r in taken] == [stored.id]
    latest = records.latest(P, Q, "job")
    assert latest is not None and (latest.message_id, latest.stored) == (stored.id, True)
    assert driver.stats(P, Q, clock.now_ms()).total == 1


def test_swift_finds_generations_its_listing_does_not_show_yet(
    swift: SwiftDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container listing may lag the creations it lists: the latest generation is found
    past the listing, so a post never takes a number already taken."""
    clock = FakeClock()
    records = reservation(swift)._records
    assert isinstance(records, SwiftDedupRecords)
    now = clock.now_ms()
    [(taken, first)] = records.create(P, Q, [DedupRecord("job", "m1", now + 1000, now)])
    assert taken and first is not None
    second = records.replace(P, Q, first, DedupRecord("job", "m2", now + 5000, now))
    assert second is not None and second.version != first.version
    listing = swift._swift.listing
    stale: list[str] = []

    def lagging(container: str, prefix: str, **kwargs: Any) -> list[dict[str, Any]]:
        if container == records._container:
            stale.append(prefix)
            return listing(container, prefix)[:1]  # the second generation is not listed yet
        return listing(container, prefix, **kwargs)

    monkeypatch.setattr(swift._swift, "listing", lagging)
    assert records.latest(P, Q, "job") == second
    assert stale, "the listing was asked"
    monkeypatch.setattr(swift._swift, "listing", lambda *args, **kwargs: [])
    assert records.latest(P, Q, "job") == second
    third = records.replace(P, Q, first, DedupRecord("job", "m3", now + 9000, now))
    assert third is None, "the number after the first generation was taken twice"
