"""How long a dispatcher leases a push for, and whether a lease has time left to use.

A lease covers three push timeouts: the request, then its settling, with room to spare. It
is counted from before the store call that takes it, so a store slow to lease or to settle
(Swift on a busy machine: seconds per call) eats into it; a push sent with its lease over,
or settled after it, may be leased and sent again by another dispatcher meanwhile. So the
lease grows by twice the slowest of the recent store calls (leases and settles) of this
dispatcher, and a push whose lease has less than two push timeouts left once the store
answered is not sent: it is owed again when its lease ends, and leased for longer then.
"""

from __future__ import annotations

import collections
import threading

# Store calls whose durations are remembered.
REMEMBERED_CALLS = 16
# The growth is at most this many times the base lease: a store that slow is down, not slow.
MAX_GROWTH_LEASES = 4


class LeaseLength:
    """The lease to ask for (:meth:`lease_ms`), from the push timeout and the durations of
    the recent store calls (:meth:`record`); :meth:`enough_left` says whether a lease that
    has ``left_ms`` to run is worth a request. Thread-safe: the lease loop and the settler
    both record."""

    def __init__(self, push_timeout_ms: int) -> None:
        self.push_timeout_ms = push_timeout_ms
        self.base_ms = 3 * push_timeout_ms
        self._recent: collections.deque[int] = collections.deque(maxlen=REMEMBERED_CALLS)
        self._lock = threading.Lock()

    def record(self, took_ms: int) -> None:
        """One store call of the dispatcher took ``took_ms``."""
        with self._lock:
            self._recent.append(max(0, took_ms))

    def lease_ms(self) -> int:
        with self._lock:
            slowest = max(self._recent, default=0)
        return self.base_ms + min(2 * slowest, MAX_GROWTH_LEASES * self.base_ms)

    def enough_left(self, left_ms: int) -> bool:
        """Whether a lease with ``left_ms`` left holds a request and its settling."""
        return left_ms >= 2 * self.push_timeout_ms
