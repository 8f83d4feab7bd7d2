"""How long a client may take to send a request's body, or to take a response.

gevent's server reads a body, and sends a response, for as long as the client keeps the
connection open. A client that promises a body and sends none (or a byte a minute), or that
asks for a large listing and reads none of it, would hold one of the worker's connections for
ever, and enough of them all of it. So each read of a body and each send to the client must
finish within the server's ``transfer_timeout``; past it the read or send fails with
:class:`TransferTimeout` and the connection is closed (a body that came too late is answered
408 first, ``api/body.py``). The API reads a body in one call, and gevent sends an answer
made of one piece (every JSON answer) in one, so each is bounded whole, not only between two
bytes.

A WebSocket session's reads are not bounded here (gevent hands the session the raw
connection, not the body reader; the session pings an idle peer itself), its sends are: a
peer that takes no frame within the bound ends its session.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import gevent

T = TypeVar("T")


class TransferTimeout(TimeoutError):
    """The client did not send or take its bytes within the transfer timeout."""

    def __init__(self, seconds: float) -> None:
        super().__init__(errno.ETIMEDOUT, f"the client took more than {seconds:g} s")
        self.seconds = seconds


class TransferTimer:
    """Runs calls that wait on one connection's client, each within ``seconds``.

    One gevent timer, started and cancelled around each call (a connection makes a few such
    calls per request; a new timer per call costs several times as much). Once a call ran
    out of time ``expired`` is true: part of a body or of a response is lost, so the
    connection serves no further request.
    """

    __slots__ = ("_calls", "_running", "_timer", "expired", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._timer = gevent.Timeout(seconds)
        self._calls = 0  # calls started, so a cut asked for one does not end a later one
        self._running = False

    def run(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)``, or TransferTimeout when it takes more than ``seconds`` (or is
        :meth:`cut`)."""
        timer = self._timer
        self._calls += 1
        self._running = True
        timer.start()
        try:
            return call(*args)
        except gevent.Timeout as timeout:
            if timeout is not timer:
                raise
            # The timer is raised again on the next expiry; the traceback a raise leaves on
            # it holds the frames of this call, and so the response or body it was sending,
            # for as long as the connection lives. It is dropped, and TransferTimeout is
            # raised outside this block, so that it does not keep the timer as its context.
            timeout.__traceback__ = None
            self.expired = True
        finally:
            self._running = False
            timer.cancel()
        raise TransferTimeout(self.seconds)

    def cut(self, greenlet: Any) -> None:
        """End the call running now in ``greenlet`` as if its time had run out (from another
        greenlet; nothing when that call has returned by then)."""
        gevent.get_hub().loop.run_callback(self._cut, greenlet, self._calls)

    def _cut(self, greenlet: Any, call: int) -> None:
        # From the hub, where the call's greenlet is parked on its connection.
        if self._running and self._calls == call:
            greenlet.throw(self._timer)


class TimedInput:
    """gevent's body reader (``wsgi.input``), each read within ``timer``.

    Once the timer expired, reads fail at once (what is left of the body cannot be found on
    the connection) and ``_discard`` (gevent reads what the application left of a body before
    the next request) reads nothing: the connection closes after the response.
    """

    __slots__ = ("_input", "_timer")

    def __init__(self, body: Any, timer: TransferTimer) -> None:
        self._input = body
        self._timer = timer

    def read(self, length: int | None = None) -> bytes:
        data: bytes = self._run(self._input.read, length)
        return data

    def readline(self, size: int | None = None) -> bytes:
        line: bytes = self._run(self._input.readline, size)
        return line

    def readlines(self, hint: int | None = None) -> list[bytes]:
        lines: list[bytes] = self._run(self._input.readlines, hint)
        return lines

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.readline, b"")

    def _discard(self) -> None:
        if not self._timer.expired:
            self._timer.run(self._input._discard)

    def _run(self, read: Callable[..., T], size: int | None) -> T:
        if self._timer.expired:
            raise TransferTimeout(self._timer.seconds)
        return self._timer.run(read, size)
