"""Least-connections accepting across the server's workers.

All workers accept from one listening socket, and the kernel hands a new connection to
whichever worker calls ``accept`` first. That is usually the worker already running on a
CPU, the busy one: a pool of keep-alive connections opened together (a client at start-up,
a load balancer) lands on one worker while the others idle, and the service then runs at
one core's speed however many workers it has.

So each worker publishes how many connections it holds in a table the master shares with
all of them (an anonymous shared mapping made before the first fork), and a worker holding
more than the least loaded one waits :data:`DEFER_S` before accepting, which leaves the
connection to a less loaded worker. The wait only biases: a worker never waits longer, so
a hung or busy peer delays nobody's connections by more than that.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from typing import Any

# Workers that take part; more (``TTIN`` beyond this) accept without balancing.
SLOTS = 64
# How long a worker holding more connections than another waits before accepting.
DEFER_S = 0.001
_EMPTY = -1


class ConnectionTable:
    """Open connections per worker slot, in memory shared by the master and its workers."""

    def __init__(self, slots: int = SLOTS) -> None:
        self._memory = mmap.mmap(-1, 8 * slots)  # MAP_SHARED: forked workers see one table
        self._counts = memoryview(self._memory).cast("q")
        for slot in range(slots):
            self._counts[slot] = _EMPTY

    def free_slot(self, taken: set[int]) -> int | None:
        """A slot no live worker holds (``taken``); None when all are held. It counts once
        its worker serves (:meth:`Share.serving`): a worker still loading takes nothing, so
        the others must not leave connections to it."""
        for slot in range(len(self._counts)):
            if slot not in taken:
                self._counts[slot] = _EMPTY
                return slot
        return None

    def release(self, slot: int) -> None:
        self._counts[slot] = _EMPTY

    def set(self, slot: int, connections: int) -> None:
        self._counts[slot] = connections

    def fewest(self) -> int:
        """The fewest connections any taking-part worker holds."""
        return min((c for c in self._counts if c != _EMPTY), default=0)


@dataclass
class Share:
    """One worker's place in the table: it counts its connections and asks whether to wait."""

    table: ConnectionTable
    slot: int
    connections: int = 0

    def serving(self) -> None:
        """The worker accepts connections from now on."""
        self.table.set(self.slot, self.connections)

    def opened(self) -> None:
        self.connections += 1
        self.table.set(self.slot, self.connections)

    def closed(self) -> None:
        self.connections -= 1
        self.table.set(self.slot, self.connections)

    def should_defer(self) -> bool:
        """True when another worker holds fewer connections than this one."""
        return self.connections > self.table.fewest()


_table: ConnectionTable | None = None


def assign_slot(server: Any, worker: Any) -> None:
    """gunicorn ``pre_fork`` (in the master): give the worker about to start a free slot."""
    global _table
    if _table is None:
        _table = ConnectionTable()
    taken = {getattr(w, "balance_slot", None) for w in server.WORKERS.values()}
    worker.balance_slot = _table.free_slot({s for s in taken if s is not None})


def release_slot(worker: Any) -> None:
    """On a worker's exit (in the master): its connections are gone with it."""
    slot = getattr(worker, "balance_slot", None)
    if _table is not None and slot is not None:
        _table.release(slot)


def share_of(worker: Any) -> Share | None:
    """In a worker: its share of the table, or None when it runs without balancing."""
    slot = getattr(worker, "balance_slot", None)
    if _table is None or slot is None:
        return None
    return Share(_table, slot)
