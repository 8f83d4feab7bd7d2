"""cmd/transfer.py: calls that wait on a client, bounded in time, on a real gevent hub (the
server's own behaviour on real connections is in tests/functional/test_slow_clients.py)."""

from __future__ import annotations

import errno
import gc
import io
import weakref

import gevent
import pytest

from zaqar_delay.cmd.transfer import TimedInput, TransferTimeout, TransferTimer


class StalledBody:
    """A body reader whose client sends ``sent`` and then nothing, counting the reads."""

    def __init__(self, sent: bytes = b"") -> None:
        self._sent = io.BytesIO(sent)
        self.reads = 0
        self.discards = 0

    def read(self, length: int | None = None) -> bytes:
        self.reads += 1
        data = self._sent.read(length)
        if length is None or len(data) < length:
            gevent.sleep(10)  # the rest never comes
        return data

    readline = read

    def _discard(self) -> None:
        self.discards += 1
        gevent.sleep(10)


def test_a_call_within_the_bound_returns_and_the_timer_is_reused() -> None:
    timer = TransferTimer(5)
    assert [timer.run(lambda n: n * 2, n) for n in range(3)] == [0, 2, 4]
    assert not timer.expired


def test_a_call_past_the_bound_fails_as_a_socket_timeout() -> None:
    timer = TransferTimer(0.05)
    with pytest.raises(TransferTimeout) as raised:
        timer.run(gevent.sleep, 10)
    assert timer.expired
    assert isinstance(raised.value, TimeoutError)
    assert raised.value.errno == errno.ETIMEDOUT  # what the handler closes without a log
    assert "0.05 s" in str(raised.value)


def test_another_timeout_passes_through_untouched() -> None:
    timer = TransferTimer(5)
    with pytest.raises(gevent.Timeout), gevent.Timeout(0.05):
        timer.run(gevent.sleep, 10)
    assert not timer.expired


def test_a_stalled_body_times_out_then_reads_and_discards_nothing_more() -> None:
    body = StalledBody(b'{"a": ')
    timed = TimedInput(body, TransferTimer(0.05))
    with pytest.raises(TransferTimeout):
        timed.read(100)
    assert body.reads == 1
    with pytest.raises(TransferTimeout):
        timed.readline()  # fails at once: the rest of the body is lost
    timed._discard()  # the connection closes instead
    assert (body.reads, body.discards) == (1, 0)


def test_discarding_an_unread_body_is_bounded_too() -> None:
    body = StalledBody()
    timer = TransferTimer(0.05)
    with pytest.raises(TransferTimeout):
        TimedInput(body, timer)._discard()
    assert body.discards == 1 and timer.expired


def test_a_body_that_arrives_is_read_whole() -> None:
    timed = TimedInput(io.BytesIO(b"line one\nline two\n"), TransferTimer(5))
    assert timed.readline() == b"line one\n"
    assert list(timed) == [b"line two\n"]


class Response:
    """What a send holds: freed once nothing refers to it."""


def test_a_cut_call_fails_as_a_timeout_and_a_later_one_is_not_cut() -> None:
    timer = TransferTimer(5)
    outcome: list[str] = []

    def send(seconds: float) -> None:
        try:
            timer.run(gevent.sleep, seconds)
            outcome.append("sent")
        except TransferTimeout:
            outcome.append("cut")

    stalled = gevent.spawn(send, 10)
    gevent.sleep(0.01)
    timer.cut(stalled)
    stalled.join(1)
    assert outcome == ["cut"] and timer.expired

    timer = TransferTimer(5)
    quick = gevent.spawn(send, 0)
    gevent.sleep(0.01)
    assert outcome == ["cut", "sent"]
    timer.cut(quick)  # asked for a call that has returned: the next is left alone
    late = gevent.spawn(send, 0.05)
    late.join(1)
    assert outcome == ["cut", "sent", "sent"] and not timer.expired


def test_a_timed_out_call_leaves_nothing_it_sent_referenced() -> None:
    timer = TransferTimer(0.05)
    response = Response()
    freed = weakref.ref(response)

    def stalled_send(data: Response) -> None:
        gevent.sleep(10)

    gc.disable()  # what a cycle would keep until the collector runs is kept
    try:
        with pytest.raises(TransferTimeout) as raised:
            timer.run(stalled_send, response)
        assert timer.expired
        assert raised.value.__context__ is None  # not the timer, with its traceback
        del raised, response
        assert freed() is None
    finally:
        gc.enable()
