"""Swift's dedup records in one chain per epoch (``storage.swift.dedup``): each chain carries one
``X-Delete-At``, past the expiry of every record in it, so Swift reclaims the records of ids
no longer posted; an id reposted in a later epoch starts that epoch's chain; and posts of one
id whose clocks lie on either side of an epoch's start store it exactly once, whatever order
their requests reach Swift in and however far its listings lag."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.swift_aio import SwiftAllInOne
from tests.helpers.memory_swift import MemorySwift, Process, TakingTurns, Version, memory_client
from tests.helpers.stores import RACING_SETTLE_MS
from tests.helpers.swift import RACERS, RACES
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import NewMessage
from zaqar_delay.storage.dedup_reservation import DedupRecord, DedupReservation, Reservation
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.access import access_from_uri
from zaqar_delay.storage.swift.connect import SwiftClient
from zaqar_delay.storage.swift.dedup import SwiftDedupRecords
from zaqar_delay.storage.swift.driver import SwiftDriver
from zaqar_delay.storage.swift.timing import SwiftTimes

P, Q = "p", "q"
CLIENT = "a" * 32
CONTAINER = "zd_dedup"
HOUR_MS = 3_600_000
TIMES = SwiftTimes(0, 0, 1_000, max_message_ttl_ms=HOUR_MS).checked()
EPOCH = 20_000
START_MS = EPOCH * TIMES.dedup_epoch_ms  # when the epoch EPOCH starts
TTL_S = 600
# The container the tests on the all-in-one race in (their ids are fresh each time).
CONTAINER_ON_SWIFT = "zd-dedup-epochs"
ID_PREFIX = f"{names.queue_prefix(P, Q)}{names.dedup_key('job')}/"


def records_on(
    swift: MemorySwift, clock: FakeClock, process: str = "a", *, reclaim: bool = True
) -> SwiftDedupRecords:
    client = memory_client(swift, Process(process))
    client.put_container(CONTAINER)
    return SwiftDedupRecords(client, CONTAINER, TIMES, clock, reclaim=reclaim)


def post(
    records: SwiftDedupRecords, clock: FakeClock, message_id: str, dedup_id: str = "job"
) -> Reservation:
    """A post of one message with ``dedup_id``, stored whole at once if it took it."""
    reserving = DedupReservation(records, lambda *_: True)
    now = clock.now_ms()
    message = NewMessage(f'"{message_id}"', TTL_S, 0, dedup_id)
    reserved = reserving.reserve(P, Q, [message], [message_id], now)
    reserving.confirm(P, Q, reserved.taken)
    return reserved


def generation(epoch: int | None, number: int) -> str:
    return names.dedup_generation(ID_PREFIX, epoch, number)


def delete_at(swift: MemorySwift, name: str) -> str | None:
    version = swift.current(CONTAINER, name)
    assert version is not None, f"{name} is not stored"
    return dict(version.headers).get("x-delete-at")


def earlier_release_record(swift: MemorySwift, doc: dict[str, Any]) -> None:
    """Generation 1 of "job" as an earlier release wrote it: named without an epoch, no
    ``X-Delete-At``, and (without ``s``) stored."""
    client = memory_client(swift, Process("old"))
    client.put_container(CONTAINER)
    client.put(CONTAINER, generation(None, 1), json.dumps(doc).encode(), names.CONTENT_TYPE)


def test_a_record_is_the_first_of_its_epoch_s_chain_and_swift_reclaims_it_whole() -> None:
    swift, clock = MemorySwift(), FakeClock(START_MS + 3 * HOUR_MS)
    records = records_on(swift, clock)
    first = post(records, clock, "m1")
    [taken] = first.taken
    assert taken.version == generation(EPOCH, 1)
    reclaim_s = TIMES.dedup_reclaim_s(EPOCH)
    assert delete_at(swift, taken.version) == str(reclaim_s), "confirming kept the header"
    # The latest a post could still write in this chain expires before Swift reclaims it:
    # within the overlap after the epoch ends, with the longest ttl.
    last_write_ms = START_MS + TIMES.dedup_epoch_ms + TIMES.dedup_overlap_ms
    assert reclaim_s * 1000 > last_write_ms + TIMES.max_message_ttl_ms
    # A repeat while it lives is answered with it; a post that fails forgets its record,
    # which keeps the chain's header too.
    assert post(records, clock, "m2").duplicate_of == {0: "m1"}
    reserving = DedupReservation(records, lambda *_: True)
    now = clock.now_ms()
    other = NewMessage('"x"', TTL_S, 0, "other")
    failed = reserving.reserve(P, Q, [other], ["m3"], now)
    reserving.forget(P, Q, failed.taken)
    assert delete_at(swift, failed.taken[0].version) == str(reclaim_s)

    assert swift.expire(reclaim_s - 1) == []
    assert sorted(swift.expire(reclaim_s)) == sorted([taken.version, failed.taken[0].version])
    assert swift.names(CONTAINER) == []


def test_an_id_posted_again_in_a_later_epoch_starts_that_epoch_s_chain() -> None:
    swift, clock = MemorySwift(), FakeClock(START_MS + 3 * HOUR_MS)
    records = records_on(swift, clock)
    post(records, clock, "m1")
    clock.advance(ms=TIMES.dedup_epoch_ms)  # a day on: the record has expired
    again = post(records, clock, "m2")
    assert again.duplicate_of == {}
    assert [r.version for r in again.taken] == [generation(EPOCH + 1, 1)]
    assert post(records, clock, "m3").duplicate_of == {0: "m2"}
    # The old chain goes; the new one stays until its own time, and is still the record.
    assert swift.expire(TIMES.dedup_reclaim_s(EPOCH)) == [generation(EPOCH, 1)]
    assert post(records, clock, "m4").duplicate_of == {0: "m2"}


def test_an_id_whose_chains_swift_reclaimed_is_posted_as_new() -> None:
    swift, clock = MemorySwift(), FakeClock(START_MS + 3 * HOUR_MS)
    records = records_on(swift, clock)
    post(records, clock, "m1")
    clock.advance(ms=3 * TIMES.dedup_epoch_ms)
    assert swift.expire(clock.now_ms() // 1000) == [generation(EPOCH, 1)]
    again = post(records, clock, "m2")
    assert again.duplicate_of == {}
    assert [r.version for r in again.taken] == [generation(EPOCH + 3, 1)]


def test_a_record_an_earlier_release_wrote_is_still_the_id_s_record() -> None:
    swift, clock = MemorySwift(), FakeClock(START_MS + 3 * HOUR_MS)
    records = records_on(swift, clock)
    now = clock.now_ms()
    earlier_release_record(swift, {"m": "m0", "e": now + 60_000, "at": now - 1_000})
    assert post(records, clock, "m1").duplicate_of == {0: "m0"}
    clock.advance(ms=120_000)  # expired: the id moves to this epoch's chain
    assert [r.version for r in post(records, clock, "m2").taken] == [generation(EPOCH, 1)]
    assert post(records, clock, "m3").duplicate_of == {0: "m2"}


def test_without_reclaim_records_are_named_as_an_earlier_release_names_them() -> None:
    """``[drivers:message_store:swift] dedup_reclaim = false``, while servers of an earlier
    release share the store: they read every record such a server writes."""
    swift, clock = MemorySwift(), FakeClock(START_MS + 3 * HOUR_MS)
    records = records_on(swift, clock, reclaim=False)
    first = post(records, clock, "m1")
    assert [r.version for r in first.taken] == [generation(None, 1)]
    assert delete_at(swift, generation(None, 1)) is None, "kept until the queue goes"
    clock.advance(ms=TTL_S * 1000)
    assert [r.version for r in post(records, clock, "m2").taken] == [generation(None, 2)]
    # A record a server with reclaim wrote is still read, and its chain stays reclaimable:
    # an id whose latest is in a daily chain moves on to the current one.
    other = SwiftDedupRecords(records._swift, CONTAINER, TIMES, clock, reclaim=True)
    clock.advance(ms=TTL_S * 1000)
    assert [r.version for r in post(other, clock, "m3").taken] == [generation(EPOCH, 1)]
    assert post(records, clock, "m4").duplicate_of == {0: "m3"}
    clock.advance(ms=TIMES.dedup_epoch_ms)
    assert [r.version for r in post(records, clock, "m5").taken] == [generation(EPOCH + 1, 1)]


# How far the posters' clocks lie from the epoch's start: within the disagreement a repeat allows
# a first post's clock (``CLOCK_DISAGREEMENT_MS``).
SKEW_MS = 4_000
BEFORE = ("nothing", "previous epoch", "older epoch", "earlier release", "live")


def _prepare(swift: MemorySwift, before: str) -> None:
    """The id's state before the racing posts: no record, one long expired, or (``live``)
    one posted just before the epoch's start as "m0"."""
    if before == "nothing":
        return
    if before == "live":
        clock = FakeClock(START_MS - SKEW_MS - 1)
        post(records_on(swift, clock, "setup"), clock, "m0")
        return
    if before == "earlier release":
        earlier_release_record(
            swift, {"m": "m0", "e": START_MS - HOUR_MS, "at": START_MS - 2 * HOUR_MS}
        )
        return
    days = 1 if before == "previous epoch" else 5
    clock = FakeClock(START_MS - days * TIMES.dedup_epoch_ms + 2 * HOUR_MS)
    post(records_on(swift, clock, "setup"), clock, "m0")


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    offsets=st.lists(st.integers(-SKEW_MS, SKEW_MS), min_size=2, max_size=3),
    before=st.sampled_from(BEFORE),
    lag=st.integers(0, 4),
    window=st.integers(0, 4),
    turns=st.lists(st.integers(0, 2), max_size=60),
)
def test_posts_of_one_id_on_either_side_of_an_epoch_s_start_store_it_once(
    offsets: list[int], before: str, lag: int, window: int, turns: list[int]
) -> None:
    posters = [f"p{i}" for i in range(len(offsets))]
    swift = TakingTurns()
    _prepare(swift, before)
    swift.replacement_windows = True
    swift.creation_window = window
    swift.take_turns([posters[t % len(posters)] for t in turns])
    swift.listing_lag = lag
    outcomes: dict[str, Reservation | Exception] = {}

    def run(name: str, offset: int) -> None:
        clock = FakeClock(START_MS + offset)
        try:
            outcomes[name] = post(records_on(swift, clock, name), clock, f"m-{name}")
        except Exception as exc:  # noqa: BLE001 - reported below: a thread cannot fail the test
            outcomes[name] = exc
        finally:
            swift.finish(name)

    threads = [
        threading.Thread(target=run, args=(name, offset))
        for name, offset in zip(posters, offsets, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert all(not thread.is_alive() for thread in threads), "a post never returned"
    failed = {n: o for n, o in outcomes.items() if isinstance(o, Exception)}
    assert not failed, failed
    stored = [n for n, o in outcomes.items() if isinstance(o, Reservation) and o.taken]
    if before == "live":
        assert stored == [], f"stored by {stored} while m0 lives: {outcomes}"
        first = "m0"
    else:
        assert len(stored) == 1, f"stored by {stored} of {outcomes}"
        first = f"m-{stored[0]}"
    for name, outcome in outcomes.items():
        assert isinstance(outcome, Reservation)
        if name not in stored:
            assert outcome.duplicate_of == {0: first}, (name, outcomes)


def lands_once_read(swift: MemorySwift, name: str, doc: dict[str, Any]) -> list[str]:
    """Make a concurrent creation of ``name`` with ``doc`` commit (as the later, kept) right
    after the object is first read; the list names it once it has."""
    landed: list[str] = []
    read = swift.get_object

    def landing(container: str, read_name: str, **kwargs: Any) -> Any:
        found = read(container, read_name, **kwargs)
        if read_name == name and not landed:
            swift._seq += 1
            swift._record(container, name, Version(swift._seq, json.dumps(doc).encode()))
            landed.append(name)
        return found

    swift.get_object = landing  # type: ignore[method-assign]
    return landed


@pytest.mark.parametrize("met_by", ["a first post", "a post blocking the previous chain"])
def test_a_marker_a_record_created_with_it_overwrites_is_not_followed(met_by: str) -> None:
    """Two posts create the previous chain's next generation together, one a marker (its
    clock in the new epoch), the other a record (its clock before): both creations succeed,
    and the record, the later, is kept. A third post that reads the marker before the
    record lands must not take it as blocking the chain: before, it followed the marker
    and started the new chain, and two posts stored the id (seen on the all-in-one, 1 run
    in 8 of ``test_posts_of_an_id_across_a_day_s_start_store_it_once_on_swift``)."""
    swift = MemorySwift()
    before = FakeClock(START_MS - TIMES.dedup_epoch_ms + HOUR_MS)
    post(records_on(swift, before, "old"), before, "m-old")  # lapsed long before the start
    contested = generation(EPOCH - 1, 2)
    marker = {"m": "", "e": 0, "at": START_MS + 2_000, "s": 1, "to": EPOCH, "by": "m-a"}
    memory_client(swift, Process("a")).put(
        CONTAINER, contested, json.dumps(marker).encode(), names.CONTENT_TYPE
    )
    record = {"m": "m-b", "e": START_MS - 2_000 + TTL_S * 1000, "at": START_MS - 2_000, "s": 1}
    # The record's creation, checked before the marker was committed, commits once it is read.
    overwritten = lands_once_read(swift, contested, record)
    after = FakeClock(START_MS + 2_000)
    records = records_on(swift, after, "c")
    if met_by == "a first post":
        outcome = post(records, after, "m-c")
        taken, answered = outcome.taken, outcome.duplicate_of
    else:  # a post that took the previous chain's lapsed record for its own meets the marker
        now = after.now_ms()
        lapsed = DedupRecord("job", "", 0, 0, True, generation(EPOCH - 1, 1))
        mine = DedupRecord("job", "m-c", now + TTL_S * 1000, now)
        replaced = records.replace(P, Q, lapsed, mine)
        latest = records.latest(P, Q, "job")
        assert latest is not None
        taken, answered = ([replaced] if replaced else []), {0: latest.message_id}

    assert overwritten == [contested], "the marker was not read before the record landed"
    assert not taken and answered == {0: "m-b"}
    assert swift.names(CONTAINER, names.dedup_chain(ID_PREFIX, EPOCH)) == []


def test_a_record_a_marker_overwrote_while_a_repeat_waited_is_not_built_on() -> None:
    """A record and a marker created together at the previous chain's next generation: a post
    of the id whose clock is before the start reads the record (live, unconfirmed) and waits
    for its post to confirm it; the marker, the later creation, then lands over it. Read
    again, a marker reads as a lapsed record. Before, the waiting post replaced it with the
    generation after it, in the chain the marker blocks, while the marker's post started the
    new chain: both stored the id (traced on the all-in-one,
    ``test_posts_of_an_id_across_a_day_s_start_store_it_once_on_swift``)."""
    swift = MemorySwift()
    old = FakeClock(START_MS - TIMES.dedup_epoch_ms + HOUR_MS)
    post(records_on(swift, old, "old"), old, "m-old")  # generation 1, lapsed long before
    contested = generation(EPOCH - 1, 2)
    record = {"m": "m-b", "e": START_MS - 2_000 + TTL_S * 1000, "at": START_MS - 2_000, "s": 0}
    memory_client(swift, Process("b")).put(
        CONTAINER, contested, json.dumps(record).encode(), names.CONTENT_TYPE
    )
    marker = {"m": "", "e": 0, "at": START_MS + 2_000, "s": 1, "to": EPOCH, "by": "m-a"}
    # The marker's creation, checked before the record was committed, commits once it is read.
    landed = lands_once_read(swift, contested, marker)
    clock = FakeClock(START_MS - 2_000)
    outcome = post(records_on(swift, clock, "c"), clock, "m-c")

    assert landed == [contested], "the record was not read before the marker landed"
    # The marker's post died before starting the new chain: the waiting post starts it.
    assert [r.version for r in outcome.taken] == [generation(EPOCH, 1)], outcome
    assert swift.names(CONTAINER, names.dedup_chain(ID_PREFIX, EPOCH - 1)) == [
        generation(EPOCH - 1, 1),
        contested,
    ]


def test_a_record_s_confirmation_lets_no_create_only_write_through() -> None:
    """Swift checks a create-only write against the object as it finds it on disk, and an
    overwrite replacing the object at that moment hides it: the write passes and stores over
    it (``MemorySwift.replacement_windows``; on the all-in-one, about 1 of 1,500 create-only
    writes racing overwrites of one object). A post that read the previous chain's first
    generation as absent, and creates its marker there just as the record's post confirms
    the record, must not store over it: before, confirming overwrote the record, the marker
    replaced it, and both posts stored the id."""
    swift = TakingTurns()
    swift.replacement_windows = True
    # Each makes its container first. The post whose clock is after the start lists and
    # reads the previous chain's first generation (absent); the other lists, creates it,
    # reads it settled and confirms it; then the marker's creation comes.
    swift.take_turns(["after"] * 3 + ["before"] * 5 + ["after"])
    outcomes: dict[str, Reservation] = {}

    def run(name: str, offset: int) -> None:
        clock = FakeClock(START_MS + offset)
        try:
            outcomes[name] = post(records_on(swift, clock, name), clock, f"m-{name}")
        finally:
            swift.finish(name)

    threads = [
        threading.Thread(target=run, args=args) for args in (("before", -2_000), ("after", 2_000))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(outcomes) == 2, "a post failed"
    assert [r.version for r in outcomes["before"].taken] == [generation(EPOCH - 1, 1)]
    assert outcomes["after"].duplicate_of == {0: "m-before"}, outcomes
    assert swift.names(CONTAINER, names.dedup_chain(ID_PREFIX, EPOCH)) == []


def test_a_dedup_record_carries_its_day_s_reclaim_time_on_swift(swift: SwiftDriver) -> None:
    """Swift accepts the chain's ``X-Delete-At`` on the record's create and keeps it when the
    post confirms the record (a POST drops what it does not repeat)."""
    clock = FakeClock()
    swift.post_messages(P, Q, [NewMessage('"once"', 3600, 0, "job-1")], CLIENT, clock.now_ms())
    container = swift._container(names.DEDUP)
    prefix = f"{names.queue_prefix(P, Q)}{names.dedup_key('job-1')}/"
    # The record is the newest chain's (within ten minutes of a day's start, a marker in the
    # previous day's chain precedes it).
    entry = swift._swift.listing(container, prefix)[-1]
    epoch, number = names.dedup_place(prefix, entry["name"])
    assert epoch == int(time.time() * 1000) // swift._times.dedup_epoch_ms and number == 1
    found = swift._swift.get(container, entry["name"], newest=True)
    assert found is not None
    headers, _ = found
    assert headers[names.DEDUP_STATE.lower()] == "stored", "the post confirmed its record"
    assert headers["x-delete-at"] == str(swift._times.dedup_reclaim_s(epoch))


def test_posts_of_an_id_across_a_day_s_start_store_it_once_on_swift(
    swift_aio: SwiftAllInOne,
) -> None:
    """Racing posts of one id on a Swift all-in-one, their clocks on either side of a day's
    start (every other time after a record of the day before expired): exactly one stores
    it, the others are answered with its message."""
    access = dataclasses.replace(access_from_uri(swift_aio.store_uri), settle_ms=RACING_SETTLE_MS)
    times = dataclasses.replace(access.times(), max_message_ttl_ms=HOUR_MS)
    day = times.dedup_epoch_ms
    start_ms = (int(time.time() * 1000) // day + 1) * day  # the next day's start
    clients = [SwiftClient(access) for _ in range(RACERS)]
    clients[0].put_container(CONTAINER_ON_SWIFT)
    try:
        for round_number in range(RACES // 2):
            dedup_id = f"job-{uuid.uuid4().hex}"
            if round_number % 2:
                before = FakeClock(start_ms - day + HOUR_MS)
                records = SwiftDedupRecords(clients[0], CONTAINER_ON_SWIFT, times, before)
                post(records, before, "m-before", dedup_id)
            outcomes = racing_posts(clients, times, start_ms, dedup_id)
            stored = [n for n, o in outcomes.items() if o.taken]
            assert len(stored) == 1, (round_number, outcomes)
            for name, outcome in outcomes.items():
                if name != stored[0]:
                    assert outcome.duplicate_of == {0: stored[0]}, (round_number, outcomes)
    finally:
        for client in clients:
            client.close()


def racing_posts(
    clients: list[SwiftClient], times: SwiftTimes, start_ms: int, dedup_id: str
) -> dict[str, Reservation]:
    """Each client posts ``dedup_id`` at once, its clock 2 s before or after ``start_ms``."""
    barrier = threading.Barrier(len(clients))
    outcomes: dict[str, Reservation] = {}

    def run(index: int, client: SwiftClient) -> None:
        clock = FakeClock(start_ms + (2_000 if index % 2 else -2_000))
        records = SwiftDedupRecords(client, CONTAINER_ON_SWIFT, times, clock)
        client.ping()
        barrier.wait()
        outcomes[f"m{index}"] = post(records, clock, f"m{index}", dedup_id)

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(outcomes) == len(clients), "a post failed"
    return outcomes
