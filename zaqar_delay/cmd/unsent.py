"""How many bytes of responses a worker holds for clients that have not taken them.

A response is built whole before it is sent, and a client that asks for a large listing or
claim and reads nothing keeps it in the worker until ``transfer_timeout`` (cmd/transfer.py)
ends the send. Twenty messages of 256 KiB of four-byte characters make an answer of about
15 MB (each character written as two ``\\uXXXX`` escapes), so a thousand such clients, each
costing its sender a connection, made a worker hold gigabytes: enough of them, and the
host's memory (and the embedded store living on it) goes.

So each worker counts the bytes of the responses it is sending (:meth:`UnsentResponses.
sending`). While the count is past the limit, the sends that have waited longest are cut,
oldest first, until it is within the limit again: at once when a send begins, and every
:data:`WATCH_EVERY_S` after, as long as it stays past (the stalled sends of a burst all begin
together, and none is old enough to cut then). A send younger than :data:`CUT_AFTER_S` is
never cut, so a burst of large answers that clients take at once goes through whole. A cut
send fails as its transfer timeout would, and its connection closes.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import gevent

LOG = logging.getLogger(__name__)

# A send younger than this is never cut: a client that takes its answer at all takes a
# large one within it on any network the service is meant for.
CUT_AFTER_S = 1.0
# Responses smaller than this are not counted: what a stalled one holds is small beside the
# limit, and the hot path of small answers does not pay for the count.
COUNTED_FROM_BYTES = 16 * 1024
# How often the count is looked at again while it is past the limit.
WATCH_EVERY_S = 0.25
# At most one warning per this many seconds per worker (a flood of stalled clients would
# otherwise write a line for each).
WARN_EVERY_S = 60.0


@dataclass(slots=True)
class _Send:
    size: int
    started: float
    cut: Callable[[], None]


class UnsentResponses:
    """The sends of one worker's responses in progress, and the limit on their bytes."""

    def __init__(
        self,
        limit_bytes: int,
        clock: Callable[[], float] = time.monotonic,
        cut_after_s: float = CUT_AFTER_S,
    ) -> None:
        self.limit_bytes = limit_bytes
        self._clock = clock
        self._cut_after_s = cut_after_s
        # In the order the sends started (dicts keep it): the oldest first.
        self._sends: dict[int, _Send] = {}
        self._next_key = 0
        self.held_bytes = 0
        self.cut_sends = 0  # over the worker's life
        self._cut_since_warning = 0
        self._warned_at: float | None = None
        self._watching = False

    @contextlib.contextmanager
    def sending(self, size: int, cut: Callable[[], None]) -> Iterator[None]:
        """Count ``size`` bytes while the block sends them. ``cut()`` ends the send from
        outside its greenlet (it is called when the limit needs its bytes back). Responses
        under :data:`COUNTED_FROM_BYTES` are sent without it."""
        key = self._next_key
        self._next_key += 1
        now = self._clock()
        self._sends[key] = _Send(size, now, cut)
        self.held_bytes += size
        if self.held_bytes > self.limit_bytes:
            self.cut_stalled(now)
            if not self._watching and self.held_bytes > self.limit_bytes:
                self._watching = True
                gevent.spawn(self._watch)
        try:
            yield
        finally:
            send = self._sends.pop(key, None)
            if send is not None:  # not cut meanwhile
                self.held_bytes -= send.size

    def _watch(self) -> None:
        try:
            while self.held_bytes > self.limit_bytes:
                gevent.sleep(WATCH_EVERY_S)
                self.cut_stalled(self._clock())
        finally:
            self._watching = False

    def cut_stalled(self, now: float) -> None:
        """Cut the sends older than :data:`CUT_AFTER_S`, oldest first, while the count is
        past the limit."""
        cut = 0
        for key, send in list(self._sends.items()):
            if self.held_bytes <= self.limit_bytes or now - send.started < self._cut_after_s:
                break  # within the limit, or every send left is young
            del self._sends[key]
            self.held_bytes -= send.size
            send.cut()
            cut += 1
        if cut:
            self.cut_sends += cut
            self._warn(cut, now)

    def _warn(self, cut: int, now: float) -> None:
        self._cut_since_warning += cut
        if self._warned_at is not None and now - self._warned_at < WARN_EVERY_S:
            return
        LOG.warning(
            "Closed %d connections whose clients had not taken their responses after %g s, "
            "this worker holding more than %d MiB of responses ([server] "
            "max_unsent_responses)",
            self._cut_since_warning,
            self._cut_after_s,
            self.limit_bytes // 2**20,
        )
        self._warned_at = now
        self._cut_since_warning = 0
