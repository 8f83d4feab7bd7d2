"""Sends by owner (``push/fair_sends.py``): owners in turn, one send of each at a time, a send
asked for again while it waits queued once, and a bound on each owner's waiting sends."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from zaqar_delay.push.fair_sends import FairSends

Make = Callable[[int, int], FairSends[str]]


@pytest.fixture
def make() -> Iterator[Make]:
    """``make(threads, per_owner)``: sends closed at the end of the test."""
    made: list[FairSends[str]] = []

    def sends(threads: int, per_owner: int) -> FairSends[str]:
        made.append(FairSends(threads=threads, per_owner=per_owner, name="test"))
        return made[-1]

    yield sends
    for sends_made in made:
        sends_made.close()


@pytest.fixture
def released() -> Iterator[threading.Event]:
    """Held sends wait for this; set at the end so no thread stays blocked."""
    event = threading.Event()
    yield event
    event.set()


def recorder(done: list[str], name: str, hold: threading.Event | None = None) -> Callable[[], str]:
    def send() -> str:
        if hold is not None:
            assert hold.wait(10)
        done.append(name)
        return name

    return send


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "never got there"
        time.sleep(0.01)


def test_an_owner_that_never_finishes_holds_back_no_other(
    make: Make, released: threading.Event
) -> None:
    sends = make(2, 100)
    done: list[str] = []
    # One owner's sends all hang (a subscriber that never answers).
    hanging = [sends.submit("stuck", n, recorder(done, f"stuck-{n}", released)) for n in range(20)]
    assert all(future is not None for future in hanging)
    # One at a time: the second thread is free for the others.
    wait_until(lambda: sends.waiting("stuck") == 19)
    other = sends.submit("other", "a", recorder(done, "other"))
    assert other is not None and other.result(5) == "other"
    assert done == ["other"]


def test_owners_take_turns(make: Make, released: threading.Event) -> None:
    sends = make(1, 100)
    done: list[str] = []
    first = sends.submit("a", "hold", recorder(done, "a-hold", released))
    assert first is not None
    wait_until(lambda: sends.waiting("a") == 0)  # running, holding the only thread
    futures = [sends.submit("a", f"a-{n}", recorder(done, f"a-{n}")) for n in range(3)]
    futures += [sends.submit("b", f"b-{n}", recorder(done, f"b-{n}")) for n in range(2)]
    released.set()
    for future in futures:
        assert future is not None
        future.result(5)
    assert done == ["a-hold", "a-0", "b-0", "a-1", "b-1", "a-2"]


def test_a_send_asked_for_again_while_it_waits_is_queued_once(
    make: Make, released: threading.Event
) -> None:
    sends = make(1, 100)
    done: list[str] = []
    assert sends.submit("a", "hold", recorder(done, "hold", released)) is not None
    wait_until(lambda: sends.waiting("a") == 0)
    again = [sends.submit("a", "same", recorder(done, "same")) for _ in range(5)]
    assert len({id(future) for future in again}) == 1
    assert sends.waiting("a") == 1
    released.set()
    assert again[0] is not None and again[0].result(5) == "same"
    assert done == ["hold", "same"]


def test_an_owner_may_have_so_many_sends_waiting(make: Make, released: threading.Event) -> None:
    sends = make(1, 3)
    done: list[str] = []
    assert sends.submit("a", "hold", recorder(done, "hold", released)) is not None
    wait_until(lambda: sends.waiting("a") == 0)
    kept = [sends.submit("a", n, recorder(done, str(n))) for n in range(5)]
    assert [future is not None for future in kept] == [True, True, True, False, False]
    assert sends.submit("b", "b", recorder(done, "b")) is not None  # another owner's room
