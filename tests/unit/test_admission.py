"""admission.py: at most ``most`` requests at work; a turn that ends goes to the project
with the fewest at work, the longest waiting among equals; a request that steps aside gives
its turn up for the block.

Requests are threads here (the module's locks and events are gevent's in a worker); the
killed waiter, a greenlet's fate, is tried in a gevent process of its own."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable

from zaqar_delay.admission import Admission, stepped_aside


class Request:
    """A thread holding a turn of ``project`` until :meth:`end`; its start is recorded in
    ``started`` once it has a turn."""

    def __init__(self, admission: Admission, project: str, started: list[str]) -> None:
        self.project = project
        self._ending = threading.Event()
        self.working = threading.Event()
        self.done = threading.Event()

        def work() -> None:
            with admission.turn(project):
                started.append(project)
                self.working.set()
                self._ending.wait(10)
            self.done.set()

        self._thread = threading.Thread(target=work, daemon=True)
        self._thread.start()

    def end(self) -> None:
        self._ending.set()
        assert self.done.wait(5)


def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 5
    while not condition():
        assert time.monotonic() < deadline, "not reached in 5 s"
        time.sleep(0.005)


def at_work(requests: list[Request]) -> Request:
    """The one of ``requests`` at work, once one is."""
    until(lambda: any(r.working.is_set() and not r.done.is_set() for r in requests))
    return next(r for r in requests if r.working.is_set() and not r.done.is_set())


def test_requests_under_the_limit_work_at_once_and_one_past_it_waits_for_a_turn() -> None:
    admission = Admission(2)
    started: list[str] = []
    first, second = Request(admission, "p", started), Request(admission, "p", started)
    assert first.working.wait(5) and second.working.wait(5)
    third = Request(admission, "p", started)
    until(lambda: admission.waiting == 1)
    assert not third.working.is_set() and admission.working == 2
    first.end()
    assert third.working.wait(5)
    second.end()
    third.end()
    assert admission.working == 0 and admission.waiting == 0


def test_no_limit_never_waits() -> None:
    admission = Admission(0)
    started: list[str] = []
    requests = [Request(admission, "p", started) for _ in range(20)]
    assert all(request.working.wait(5) for request in requests)
    assert admission.working == 20
    for request in requests:
        request.end()


def test_a_turn_goes_to_the_project_with_fewest_at_work_not_to_the_first_in_line() -> None:
    admission = Admission(2)
    started: list[str] = []
    busy = [Request(admission, "hostile", started) for _ in range(2)]
    assert all(request.working.wait(5) for request in busy)
    backlog = [Request(admission, "hostile", started) for _ in range(3)]
    until(lambda: admission.waiting == 3)
    other = Request(admission, "calm", started)
    until(lambda: admission.waiting == 4)

    busy[0].end()
    assert other.working.wait(5)
    # calm took the turn although hostile's backlog waited first.
    assert started == ["hostile", "hostile", "calm"]
    assert not any(request.working.is_set() for request in backlog)

    busy[1].end()
    other.end()
    for request in backlog:
        assert request.working.wait(5)
        request.end()
    assert started == ["hostile", "hostile", "calm", "hostile", "hostile", "hostile"]


def test_among_projects_with_as_many_at_work_the_longest_waiting_goes_first() -> None:
    admission = Admission(1)
    started: list[str] = []
    holder = Request(admission, "c", started)
    assert holder.working.wait(5)
    a = Request(admission, "a", started)
    until(lambda: admission.waiting == 1)
    b = Request(admission, "b", started)
    until(lambda: admission.waiting == 2)
    holder.end()
    assert a.working.wait(5)
    assert not b.working.is_set()
    a.end()
    assert b.working.wait(5)
    b.end()
    assert started == ["c", "a", "b"]


def test_projects_with_requests_waiting_get_turns_in_rotation() -> None:
    """With one turn, no project has more at work than another when it ends: the project
    whose last turn began longest ago goes next, not the one first in line."""
    admission = Admission(1)
    started: list[str] = []
    holder = Request(admission, "a", started)
    assert holder.working.wait(5)
    waiting = [Request(admission, "a", started) for _ in range(2)]
    until(lambda: admission.waiting == 2)
    waiting += [Request(admission, "b", started) for _ in range(2)]
    until(lambda: admission.waiting == 4)
    holder.end()
    for _ in waiting:
        at_work(waiting).end()
    assert started == ["a", "b", "a", "b", "a"]


def test_a_request_stepped_aside_holds_no_turn_and_waits_for_one_after() -> None:
    admission = Admission(1)
    started: list[str] = []
    aside, back = threading.Event(), threading.Event()
    steps: list[str] = []

    def waiting_claim() -> None:
        with admission.turn("p"):
            with stepped_aside():
                aside.set()
                back.wait(5)
            steps.append("working again")

    claim = threading.Thread(target=waiting_claim, daemon=True)
    claim.start()
    assert aside.wait(5)
    assert admission.working == 0
    other = Request(admission, "q", started)
    assert other.working.wait(5)  # the turn the claim gave up
    back.set()
    until(lambda: admission.waiting == 1)
    assert steps == []  # the claim waits for a turn again
    other.end()
    claim.join(5)
    assert steps == ["working again"] and admission.working == 0


def test_stepping_aside_outside_a_turn_does_nothing() -> None:
    with stepped_aside():
        pass


def test_the_seconds_each_waiting_request_waited_are_told() -> None:
    waited: list[float] = []
    admission = Admission(1, waited.append)
    started: list[str] = []
    first = Request(admission, "p", started)
    assert first.working.wait(5)
    assert waited == []  # a request that did not wait is not told
    second = Request(admission, "p", started)
    until(lambda: admission.waiting == 1)
    time.sleep(0.05)
    first.end()
    assert second.working.wait(5)
    second.end()
    assert len(waited) == 1 and waited[0] >= 0.05


# In a gevent process: a waiter killed in line leaves it, and one killed after a turn was
# handed to it (before it ran again) passes that turn on to the next in line.
KILLED_WAITERS = textwrap.dedent(
    """
    from gevent import monkey

    monkey.patch_all()

    import gevent

    from zaqar_delay.admission import Admission

    admission = Admission(1)
    started = []

    def request(name, hold, last_act=None):
        with admission.turn(name):
            started.append(name)
            gevent.sleep(hold)
            if last_act is not None:
                last_act()

    # The holder's last act, as its turn ends: a kill of "handed", which lands (callbacks
    # run in order) after the turn was handed to it and before it could run again.
    holder = gevent.spawn(request, "holder", 0.2, lambda: handed.kill(block=False))
    gevent.sleep(0)
    killed_in_line = gevent.spawn(request, "killed in line", 0)
    handed = gevent.spawn(request, "handed", 0)
    last = gevent.spawn(request, "last", 0)
    gevent.sleep(0)
    assert admission.waiting == 3, admission.waiting
    killed_in_line.kill()
    assert admission.waiting == 2, admission.waiting
    last.join(2)
    assert handed.dead and isinstance(handed.value, gevent.GreenletExit), handed.value
    assert started == ["holder", "last"], started
    assert admission.working == 0 and admission.waiting == 0
    print("ok")
    """
)


# In a gevent process: a request killed while it waits to take its turn again after
# stepping aside gives back no turn it does not hold.
KILLED_AFTER_STEPPING_ASIDE = textwrap.dedent(
    """
    from gevent import monkey

    monkey.patch_all()

    import gevent

    from zaqar_delay.admission import Admission, stepped_aside

    admission = Admission(1)

    def waiting_claim():
        with admission.turn("w"):
            with stepped_aside():
                gevent.sleep(0.05)

    def busy():
        with admission.turn("b"):
            gevent.sleep(0.5)

    claim = gevent.spawn(waiting_claim)
    gevent.sleep(0.01)  # the claim stepped aside
    holder = gevent.spawn(busy)
    gevent.sleep(0.1)  # the claim waits for its turn again
    assert admission.waiting == 1, admission.waiting
    claim.kill()
    # It ended as killed, not failing to give back a turn it did not hold.
    assert isinstance(claim.value, gevent.GreenletExit), claim.exception
    assert admission.waiting == 0 and admission.working == 1
    holder.join()
    assert admission.working == 0, admission.working
    with admission.turn("next"):
        assert admission.working == 1
    print("ok")
    """
)


def run_in_gevent(script: str) -> None:
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "ok", run.stderr


def test_killed_waiters_leave_their_line_and_pass_on_a_turn_handed_to_them() -> None:
    run_in_gevent(KILLED_WAITERS)


def test_a_request_killed_waiting_to_take_its_turn_again_gives_back_none() -> None:
    run_in_gevent(KILLED_AFTER_STEPPING_ASIDE)
