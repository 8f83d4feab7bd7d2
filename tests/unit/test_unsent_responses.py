"""cmd/unsent.py: the bytes of responses a worker sends, and the sends cut past its limit
(the server's own behaviour on real connections is in tests/functional/test_unsent_responses.py)."""

from __future__ import annotations

import contextlib

import gevent

from zaqar_delay.cmd.unsent import CUT_AFTER_S, UnsentResponses

MIB = 2**20


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Sends:
    """Sends begun on one ledger and left open, with the names of those cut."""

    def __init__(self, limit: int) -> None:
        self.clock = Clock()
        self.unsent = UnsentResponses(limit, self.clock)
        self.cut: list[str] = []
        self.open = contextlib.ExitStack()

    def begin(self, name: str, size: int) -> None:
        self.open.enter_context(self.unsent.sending(size, lambda: self.cut.append(name)))


def test_sends_within_the_limit_are_counted_and_uncounted_when_they_end() -> None:
    sends = Sends(4 * MIB)
    with sends.unsent.sending(MIB, lambda: None):
        with sends.unsent.sending(2 * MIB, lambda: None):
            assert sends.unsent.held_bytes == 3 * MIB
        assert sends.unsent.held_bytes == MIB
    assert sends.unsent.held_bytes == 0
    assert sends.cut == []


def test_past_the_limit_the_oldest_stalled_sends_are_cut_until_it_fits() -> None:
    sends = Sends(3 * MIB)
    for name in ("first", "second", "third"):
        sends.begin(name, MIB)
        sends.clock.now += 0.1
    sends.clock.now += CUT_AFTER_S
    sends.begin("fourth", 2 * MIB)  # 5 MiB held: two of the oldest make room
    assert sends.cut == ["first", "second"]
    assert sends.unsent.held_bytes == 3 * MIB
    assert sends.unsent.cut_sends == 2
    sends.open.close()  # the cut sends' own ends do not count them out again
    assert sends.unsent.held_bytes == 0


def test_young_sends_are_not_cut_even_past_the_limit() -> None:
    sends = Sends(MIB)
    sends.begin("first", MIB)
    sends.clock.now += CUT_AFTER_S / 2
    sends.begin("second", MIB)
    assert sends.cut == []
    assert sends.unsent.held_bytes == 2 * MIB
    sends.clock.now += CUT_AFTER_S / 2
    sends.unsent.cut_stalled(sends.clock())
    assert sends.cut == ["first"]  # now a second old; the second is not yet


def test_a_burst_that_stalls_is_cut_later_without_another_send() -> None:
    sends = Sends(MIB)
    sends.clock.now = 0.0
    clock_runs = gevent.spawn(_advance, sends.clock)
    for name in ("first", "second", "third"):
        sends.begin(name, MIB)  # all young: nothing cut as they begin
    assert sends.cut == []
    gevent.sleep(CUT_AFTER_S + 0.6)  # the ledger looks again while it is past its limit
    clock_runs.kill()
    assert sends.cut == ["first", "second"]
    assert sends.unsent.held_bytes == MIB


def _advance(clock: Clock) -> None:
    while True:
        gevent.sleep(0.05)
        clock.now += 0.05
