"""A room closed as its server process stops: its waiting claims answer after one more
attempt, and a claim that comes after makes one attempt."""

from __future__ import annotations

import threading
import time

from zaqar_delay.clock import FakeClock
from zaqar_delay.waiting import WaitRoom


def none(now_ms: int) -> int | None:
    return None


def test_a_closed_room_answers_its_waiting_claims_after_one_more_attempt() -> None:
    room = WaitRoom(None, FakeClock())
    attempts: list[str] = []
    answers: list[object] = []

    def attempt() -> object | None:
        attempts.append("tried")
        return None

    def wait_on(queue: str) -> None:
        answers.append(room.wait_for("p", queue, 600, attempt, none))

    waiters = [threading.Thread(target=wait_on, args=(q,)) for q in ("q", "q", "other")]
    for waiter in waiters:
        waiter.start()
    deadline = time.monotonic() + 10
    while (room.asleep("p", "q"), room.asleep("p", "other")) != (2, 1):
        assert time.monotonic() < deadline, "the claims did not fall asleep"
        time.sleep(0.01)
    assert len(attempts) == len(waiters)

    room.close()
    for waiter in waiters:
        waiter.join(10)
    assert not any(waiter.is_alive() for waiter in waiters), "a claim still waits"
    assert answers == [None] * len(waiters)
    assert len(attempts) == 2 * len(waiters)  # each tried once more when the room closed


def test_a_claim_that_comes_after_the_room_closed_tries_once() -> None:
    room = WaitRoom(None, FakeClock())
    room.close()
    attempts: list[str] = []

    def attempt() -> str | None:
        attempts.append("tried")
        return None

    assert room.wait_for("p", "q", 600, attempt, none) is None
    assert attempts == ["tried"]
    assert room.wait_for("p", "q", 600, lambda: "claimed", none) == "claimed"
