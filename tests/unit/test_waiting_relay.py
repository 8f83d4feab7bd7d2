"""The relay of waiting claims: a waiter that claimed something wakes the first sleepers of its
line, as many as the store's ``waiting_claim_relay``, never one already awake or woken."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from zaqar_delay import waiting
from zaqar_delay.clock import FakeClock
from zaqar_delay.waiting import Seat, WaitRoom


def line_of(room: WaitRoom, stack: contextlib.ExitStack, count: int) -> list[Seat]:
    """``count`` seats in one line, every one but the first asleep (as after finding nothing)."""
    seats = [stack.enter_context(room.seat("p", "q")) for _ in range(count)]
    for seat in seats[1:]:
        seat.asleep = True
    return seats


@pytest.mark.parametrize("relay", [1, 2, 3])
def test_a_claimer_wakes_the_first_sleepers_of_its_line(relay: int) -> None:
    room = WaitRoom(None, FakeClock(), relay)
    with contextlib.ExitStack() as stack:
        claimer, *sleepers = line_of(room, stack, 6)
        assert all(seat.sleeping for seat in sleepers)
        claimer.relay()
        assert [not seat.sleeping for seat in sleepers] == [n < relay for n in range(5)]


def test_a_second_relay_skips_the_woken_and_the_awake() -> None:
    room = WaitRoom(None, FakeClock(), 2)
    with contextlib.ExitStack() as stack:
        claimer, first, second, trying, third, fourth, fifth = line_of(room, stack, 7)
        trying.asleep = False  # awake, trying to claim: waking it would add nothing
        claimer.relay()
        assert (first.sleeping, second.sleeping, third.sleeping) == (False, False, True)
        first.relay()  # woken, it claimed too, before the second ran
        assert (third.sleeping, fourth.sleeping, fifth.sleeping) == (False, False, True)


def test_a_burst_reaches_every_waiter_through_relays(monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the head has a timer, and it is beyond the test: the post wakes the head, and every
    # other waiter must be reached by a relay.
    monkeypatch.setattr(waiting, "RECHECK_WITHOUT_WAKEUPS_S", 60.0)
    room = WaitRoom(None, FakeClock(), 2)
    lock = threading.Lock()
    available: list[int] = []
    attempts: list[bool] = []

    def attempt() -> int | None:
        with lock:
            attempts.append(bool(available))
            return available.pop(0) if available else None

    got: list[int | None] = []
    threads = [
        threading.Thread(target=lambda: got.append(room.wait_for("p", "q", 30, attempt, none)))
        for _ in range(16)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while room.asleep("p", "q") < 16:  # every waiter found nothing and sleeps
        assert time.monotonic() < deadline, "the waiters did not fall asleep"
        time.sleep(0.01)
    with lock:
        available.extend(range(16))
    room.written("p", "q")
    for thread in threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in threads), "a waiter was never woken"
    assert sorted(got) == list(range(16))  # type: ignore[type-var]
    # Each claim wakes at most two, so the attempts that found nothing after the post are at
    # most two per claim that found something (16 found nothing before it).
    assert attempts.count(False) - 16 <= 2 * 16


def none(now_ms: int) -> None:
    """``next_claimable_ms`` of a queue with nothing due later."""
    return None
