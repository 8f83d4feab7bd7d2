"""The Swift driver's time bounds: the relations between them are checked when a driver is
made (a pool's URI may set some of them), and the deadlines they give posts of several
messages and pops are kept, so a slow Swift makes them fail whole rather than half."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import pytest

from tests.helpers.dedup_stalls import repeated_while_stalled
from tests.helpers.memory_swift import MemorySwift, Process, memory_client
from tests.helpers.stores import every_message
from zaqar_delay import errors
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import Claim, ClaimTimes, NewMessage
from zaqar_delay.storage.bounds import CLOCK_DISAGREEMENT_MS
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.access import SwiftAccess, access_from_uri
from zaqar_delay.storage.swift.connect import SwiftClient
from zaqar_delay.storage.swift.driver import SwiftDriver
from zaqar_delay.storage.swift.timing import ORPHAN_GRACE_MS, POP_HOLD_MS, SwiftTimes

P, Q = "p", "q"
URI = "swift://a%3Au:k@/p?auth_url=http://127.0.0.1:1/auth/v1.0"


def test_the_default_bounds_hold_every_relation() -> None:
    times = SwiftAccess("http://127.0.0.1:1/auth/v1.0", "a:u", "k", "p").times()
    assert times.problems() == []
    assert times.post_deadline_ms == 40_000
    assert times.pop_deadline_ms == 40_000


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"request_timeout_ms": 30_000}, "orphan grace"),
        ({"request_timeout_ms": 30_000}, "pop hold"),
        ({"settle_ms": 10_000}, "taker grace"),
        ({"settle_ms": 10_000}, "lease grace"),
        ({"metadata_cache_ms": 20_000}, "metadata_cache_ms"),
        ({"settle_ms": -1}, "must not be negative"),
        ({"dedup_overlap_ms": 100_000}, "dedup overlap"),
        ({"dedup_epoch_ms": 2_000_000}, "dedup epoch"),
    ],
)
def test_a_broken_relation_is_named(change: dict[str, int], named: str) -> None:
    times = dataclasses.replace(SwiftTimes(100, 250, 10_000), **change)
    with pytest.raises(errors.StorageConfigError, match=named):
        times.checked()


def test_a_store_uri_setting_a_settle_longer_than_the_grace_is_refused() -> None:
    access = access_from_uri(URI + "&settle_ms=60000")
    client = SwiftClient(access)
    try:
        with pytest.raises(errors.StorageConfigError, match="taker grace"):
            SwiftDriver(client)
    finally:
        client.close()


@pytest.fixture
def slow_swift() -> MemorySwift:
    """Swift in memory whose every request takes 5 ms."""
    swift = MemorySwift()
    swift.pause_s = 0.005
    return swift


def driver_on(swift: MemorySwift, **bounds: int) -> SwiftDriver:
    times = dataclasses.replace(SwiftTimes(0, 0, 1_000), **bounds)
    driver = SwiftDriver(memory_client(swift, Process("a")), namespace="zd", times=times)
    driver.prepare()
    return driver


def test_a_post_of_several_past_its_deadline_is_refused_and_stores_nothing(
    slow_swift: MemorySwift,
) -> None:
    # A deadline of 1 ms: writing the messages takes longer, so the commit is not sent.
    driver = driver_on(slow_swift, orphan_grace_ms=2_001)
    assert driver._times.post_deadline_ms == 1
    now = FakeClock().now_ms()
    batch = [NewMessage(json.dumps(n), 3600, 0) for n in range(3)]
    with pytest.raises(errors.StorageUnavailable, match="too slow"):
        driver.post_messages(P, Q, batch, "c", now)
    assert slow_swift.names(f"zd_{names.MESSAGES}", names.queue_prefix(P, Q)) == []
    # One message commits with its own write: no deadline, unless it reserved a dedup id.
    (one,) = driver.post_messages(P, Q, batch[:1], "c", now).ids
    assert [m.id for m in driver.get_messages(P, Q, [one], now)] == [one]
    with pytest.raises(errors.StorageUnavailable, match="too slow"):
        driver.post_messages(P, Q, [NewMessage('"once"', 3600, 0, "job")], "c", now)
    assert [m.id for m in every_message(driver, P, Q, now)] == [one]
    assert not driver.remembers_dedup_ids(P, Q, ["job"], now), "its dedup id was forgotten"


def test_a_post_stalled_past_its_deadline_leaves_its_dedup_id_to_a_repeat(
    slow_swift: MemorySwift, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first post of a dedup id stalls after reserving it until past its deadline, and a
    repeat past its grace takes the id over and stores the message meanwhile: the stalled
    post is refused and stores nothing. Before, it stored the message a second time."""
    driver = driver_on(slow_swift, orphan_grace_ms=2_500)
    assert driver._times.post_deadline_ms == 500
    clock = FakeClock()
    later = FakeClock(clock.now_ms() + driver._dedup.dead_after_ms)  # the repeat's clock
    post = [NewMessage('"once"', 3600, 0, "job")]
    repeats = repeated_while_stalled(
        monkeypatch,
        driver,
        lambda: driver.post_messages(P, Q, post, "c", later.now_ms()),
        then=lambda: time.sleep(0.5),  # past the first post's deadline
    )
    with pytest.raises(errors.StorageUnavailable, match="too slow"):
        driver.post_messages(P, Q, post, "c", clock.now_ms())
    [repeat] = repeats
    assert repeat.duplicates == (), "the repeat took the id over and stored the message"
    assert [m.id for m in every_message(driver, P, Q, later.now_ms())] == repeat.ids
    again = driver.post_messages(P, Q, post, "c", later.now_ms())
    assert (again.ids, again.duplicates) == (repeat.ids, (0,))


def test_a_claimer_whose_clock_runs_ahead_leaves_a_committing_post_of_several_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A post of several is about to commit, within its deadline on its own watch, when a
    claimer whose clock reads its messages past the orphan grace (the post slow, and the
    claimer's clock ahead of the post's) meets them uncommitted. Before, the claimer deleted
    them, and the post then answered 201 without its messages."""
    driver = driver_on(MemorySwift())
    clock = FakeClock()
    ahead = FakeClock(clock.now_ms() + ORPHAN_GRACE_MS + 1000)  # the claimer's clock
    check, remove = driver._check_deadline, driver._remove_orphan
    met: list[str] = []
    claimed: list[Claim | None] = []

    def claim_meanwhile(started: float) -> None:
        claimed.append(driver.create_claim(P, Q, ClaimTimes(60, 0), 10, ahead.now_ms()))
        check(started)

    def removing(project: str, queue: str, entry: str, now_ms: int) -> None:
        met.append(entry.rsplit("/", 1)[1])
        remove(project, queue, entry, now_ms)

    monkeypatch.setattr(driver, "_check_deadline", claim_meanwhile)
    monkeypatch.setattr(driver, "_remove_orphan", removing)
    batch = [NewMessage('"a"', 3600, 0), NewMessage('"b"', 3600, 0)]
    posted = driver.post_messages(P, Q, batch, "c", clock.now_ms())
    assert claimed == [None]
    assert sorted(met) == sorted(posted.ids), "the claimer met both uncommitted"
    assert all(ahead.now_ms() - names.named_ms_of(i) > ORPHAN_GRACE_MS for i in posted.ids)
    claim = driver.create_claim(P, Q, ClaimTimes(60, 0), 10, ahead.now_ms())
    assert claim is not None
    assert sorted(m.id for m in claim.messages) == sorted(posted.ids)


def test_a_pop_past_its_deadline_deletes_nothing_and_its_messages_come_back(
    slow_swift: MemorySwift,
) -> None:
    driver = driver_on(slow_swift, pop_hold_ms=2_001)
    clock = FakeClock()
    posted = driver.post_messages(P, Q, [NewMessage('"m"', 3600, 0)], "c", clock.now_ms())
    with pytest.raises(errors.StorageUnavailable, match="too slow"):
        driver.pop_messages(P, Q, 1, clock.now_ms())
    assert [m.id for m in driver.get_messages(P, Q, posted.ids, clock.now_ms())] == posted.ids
    clock.advance(ms=2_001 + CLOCK_DISAGREEMENT_MS)  # the pop's hold ends, on any clock
    claim = driver.create_claim(P, Q, ClaimTimes(60, 0), 5, clock.now_ms())
    assert claim is not None
    assert [m.id for m in claim.messages] == posted.ids


def test_a_claimer_whose_clock_runs_ahead_leaves_a_message_a_pop_is_deleting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pop took a message and is about to delete it, within its deadline on its own watch,
    when a claimer whose clock reads the pop's hold as over (the pop slow, and the claimer's
    clock ahead of the pop's) meets it. Before, the claimer took it too: the message was
    handed out twice."""
    driver = driver_on(MemorySwift())
    clock = FakeClock()
    ahead = FakeClock(clock.now_ms() + POP_HOLD_MS + 1000)  # the claimer's clock
    posted = driver.post_messages(P, Q, [NewMessage('"m"', 3600, 0)], "c", clock.now_ms())
    remove = driver._remove_message
    claimed: list[Claim | None] = []

    def claim_first(*args: Any, **kwargs: Any) -> None:
        if not claimed:
            claimed.append(driver.create_claim(P, Q, ClaimTimes(60, 0), 5, ahead.now_ms()))
        remove(*args, **kwargs)

    monkeypatch.setattr(driver, "_remove_message", claim_first)
    popped = driver.pop_messages(P, Q, 1, clock.now_ms())
    assert [m.id for m in popped] == posted.ids
    assert claimed == [None], "the claimer took the message the pop holds"
    monkeypatch.undo()
    assert driver.create_claim(P, Q, ClaimTimes(60, 0), 5, ahead.now_ms()) is None
