"""Waiting claims: where claim requests wait, in one server process, for a message to claim.

Waiters on a queue stand in line. Only the head of the line keeps a timer, set to the
queue's next due time (or claim expiry), and the store's wake-ups (a message posted, released
or rescheduled) wake only the head. A waiter that claims something wakes the first ones still
asleep in its line (the store's ``waiting_claim_relay`` of them), since more may be
claimable; one that finds nothing waits again. So a wake-up costs one claim attempt per server
process, not one per waiter, whatever the number waiting. With a relay of one, a burst of n
messages reaches n waiters one claim after another; with two, the number trying doubles each
round while claims find messages (about log2(n) claim times), at the cost of up to two
attempts that find nothing per claim that found something.

When the server process stops (:meth:`WaitRoom.close`, through ``stopping``), each waiting
claim makes one last attempt and answers what it found, an empty answer if nothing, rather
than hold the process until its wait runs out or the process is killed under it.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from zaqar_delay import sibling_wakeups, stopping
from zaqar_delay.admission import stepped_aside
from zaqar_delay.clock import Clock
from zaqar_delay.errors import StorageUnavailable, TooManyRequests
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.traits import Wakeups
from zaqar_delay.waiting_seats import ProjectSeats

LOG = logging.getLogger(__name__)

T = TypeVar("T")

# Writers are asked to send wake-ups for this long, and asked again before it runs out (by
# each waiter before it tries, and for every line by the process's renewer thread).
ANNOUNCE_TTL_MS = 10_000
ANNOUNCE_EVERY_S = 3.0
# With wake-ups from the store, the head of a line sleeps until the queue's next due time or
# claim expiry, or a wake-up: a reconnection wakes every head, so this timer only bounds what
# a wake-up lost without a reconnection could cost.
RECHECK_WITH_WAKEUPS_S = 30.0
# Without wake-ups from the store, the head of a line re-checks this often.
RECHECK_WITHOUT_WAKEUPS_S = 1.0
# With pools, the head of a line waiting on a queue placed nowhere (it does not exist yet)
# re-checks this often: the queue's wake-ups will come from the pool it is placed on.
UNPLACED_RECHECK_MS = 1000
# Longest a first waiter waits for the process's wake-up subscription to be in place.
LISTENER_START_S = 2.0


class Seat:
    """One waiting claim's place in its queue's line."""

    def __init__(self, room: WaitRoom, channel: str, project: str, queue: str) -> None:
        self._room = room
        self.channel = channel
        self.project, self.queue = project, queue
        self._event = threading.Event()
        self.asleep = False

    def wake(self) -> None:
        self._event.set()

    @property
    def sleeping(self) -> bool:
        """Asleep and not yet woken: a waiter a relay may wake."""
        return self.asleep and not self._event.is_set()

    def wait(self, timeout_s: float) -> None:
        """Sleep until woken or ``timeout_s`` passes."""
        self.asleep = True
        try:
            with stepped_aside():  # a sleeping claim does no work
                self._event.wait(max(0.0, timeout_s))
        finally:
            self.asleep = False
        self._event.clear()

    def is_head(self) -> bool:
        return self._room.head(self.channel) is self

    def relay(self) -> None:
        """Wake the first sleepers of this line (the room's ``relay`` of them): there may be
        more to claim."""
        self._room.wake_sleepers(self.channel, self._room.relay)


class WaitRoom:
    """Every waiting claim of this process, keyed by the store's wake channel."""

    def __init__(
        self,
        wakeups: Wakeups | None,
        clock: Clock,
        relay: int = 1,
        seats: ProjectSeats | None = None,
    ) -> None:
        """``relay``: how many sleepers a waiter that claimed something wakes; ``seats``: the
        waiting claims each project holds in the process (every room's)."""
        self._wakeups = wakeups
        self._clock = clock
        self.relay = relay
        self._seats = seats or ProjectSeats()
        self._lock = threading.Lock()
        self._lines: dict[str, collections.deque[Seat]] = {}
        self._announced: dict[str, float] = {}
        self._listener: threading.Thread | None = None
        self._listening = threading.Event()
        # Set once the store's wake-ups ended for good (a MongoDB without change streams, or
        # the driver closed): from then on the heads poll as without wake-ups.
        self._polling = threading.Event()
        # Never set in production: the listener ends when its driver is closed.
        self._stop = threading.Event()
        # Set when the process stops serving (close): no claim waits any more.
        self._closed = threading.Event()
        stopping.track(self, WaitRoom.close)

    @property
    def recheck_s(self) -> float:
        """Longest sleep of a line's head: a safety net when the store sends wake-ups, the
        polling period when it does not."""
        if self._wakeups is None or self._polling.is_set():
            return RECHECK_WITHOUT_WAKEUPS_S
        return RECHECK_WITH_WAKEUPS_S

    @contextlib.contextmanager
    def seat(self, project: str, queue: str) -> Iterator[Seat]:
        """Stand in the queue's line for the duration of the block."""
        channel = self._channel(project, queue)
        self._start_listener()
        seat = Seat(self, channel, project, queue)
        with self._lock:
            self._lines.setdefault(channel, collections.deque()).append(seat)
        try:
            yield seat
        finally:
            with self._lock:
                line = self._lines[channel]
                was_head = line[0] is seat
                line.remove(seat)
                if not line:
                    del self._lines[channel]
                elif was_head:
                    line[0].wake()  # the new head takes over the timer

    def wait_for(
        self,
        project: str,
        queue: str,
        wait_s: float,
        attempt: Callable[[], T | None],
        next_claimable_ms: Callable[[int], int | None],
    ) -> T | None:
        """Call ``attempt`` until it returns something or ``wait_s`` seconds pass (None).

        Between attempts the caller sleeps in the queue's line: behind the head until woken,
        at the head until a wake-up from the store, or until a millisecond past the time
        ``next_claimable_ms(now_ms)`` names (a due time or claim expiry; None for none), and
        at most :attr:`recheck_s`.

        A project that has as many claims waiting in the process as it may (``ProjectSeats``)
        makes one attempt, and TooManyRequests (429) when it finds nothing.
        """
        deadline = time.monotonic() + wait_s
        with self._seats.taken(project) as seated:
            if not seated:
                return self._attempt_unseated(project, attempt)
            return self._wait_in_line(project, queue, deadline, attempt, next_claimable_ms)

    def _attempt_unseated(self, project: str, attempt: Callable[[], T | None]) -> T:
        result = attempt()
        if result is None:
            raise TooManyRequests(
                f"Project {project} has {self._seats.most} claims waiting on this server "
                "process, the most it may have ([transport] max_waiting_claims_per_project): "
                "try again later, or claim without ?wait=."
            )
        return result

    def _wait_in_line(
        self,
        project: str,
        queue: str,
        deadline: float,
        attempt: Callable[[], T | None],
        next_claimable_ms: Callable[[int], int | None],
    ) -> T | None:
        with self.seat(project, queue) as seat:
            while True:
                self.announce(project, queue)
                result = attempt()
                if result is not None:
                    seat.relay()  # there may be more: sleepers in line try too
                    return result
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed.is_set():
                    return None
                sleep = self._head_sleep_s(next_claimable_ms) if seat.is_head() else remaining
                seat.wait(min(remaining, sleep))

    def close(self) -> None:
        """Answer every waiting claim after one more attempt, and wait no more from now on."""
        self._closed.set()
        with self._lock:
            seats = [seat for line in self._lines.values() for seat in line]
        for seat in seats:
            seat.wake()

    def _head_sleep_s(self, next_claimable_ms: Callable[[int], int | None]) -> float:
        now_ms = self._clock.now_ms()
        next_ms = next_claimable_ms(now_ms)
        if next_ms is None:
            return self.recheck_s
        return min(self.recheck_s, (next_ms - now_ms + 1) / 1000)

    def announce(self, project: str, queue: str) -> None:
        """Make sure writers send wake-ups for this queue (throttled per process).

        When the line's last announcement may have lapsed before this one took effect
        (renewals failed, or took longer than its lifetime, while the store stalled), writers
        may have sent no wake-up meanwhile, and the listener need not have reconnected: the
        line's head is woken to look again."""
        if self._wakeups is None:
            return
        channel = self._wakeups.channel(project, queue)
        started = time.monotonic()
        last = self._announced.get(channel)
        if last is not None and started - last < ANNOUNCE_EVERY_S:
            return
        self._wakeups.announce(project, queue, ANNOUNCE_TTL_MS)
        self._announced[channel] = started
        if last is not None and time.monotonic() - last >= ANNOUNCE_TTL_MS / 1000:
            self._wake_head(channel)

    def asleep(self, project: str, queue: str) -> int:
        """How many claims on the queue are asleep in its line right now: each has tried to
        claim and found nothing, and waits for a wake-up or its timer."""
        channel = self._channel(project, queue)
        with self._lock:
            return sum(seat.asleep for seat in self._lines.get(channel, ()))

    def head(self, channel: str) -> Seat | None:
        with self._lock:
            line = self._lines.get(channel)
            return line[0] if line else None

    def wake_sleepers(self, channel: str, count: int) -> None:
        """Wake the first ``count`` waiters of the line that are asleep and not yet woken
        (those awake are trying already)."""
        woken = 0
        with self._lock:  # held while waking, so that two relays never wake the same ones
            for seat in self._lines.get(channel, ()):
                if woken == count:
                    return
                if seat.sleeping:
                    seat.wake()
                    woken += 1

    # -- wake-ups from the store ---------------------------------------------------------------

    def _start_listener(self) -> None:
        if self._wakeups is None:
            self._listen_to_siblings()
            return
        if self._listener is not None:
            return
        with self._lock:
            if self._listener is not None:
                return
            self._listener = threading.Thread(
                target=self._listen, name="zaqar-delay-wakeups", daemon=True
            )
            self._listener.start()
            threading.Thread(target=self._renew, name="zaqar-delay-announcer", daemon=True).start()
        # A wake-up sent before the subscription exists would be lost: the first waiter of
        # the process waits (briefly) until it is in place.
        self._listening.wait(LISTENER_START_S)

    def _listen(self) -> None:
        assert self._wakeups is not None
        try:
            self._wakeups.listen(self._wake_head, self._wake_everyone, self._stop)
        except StorageUnavailable:  # pragma: no cover - listen() handles outages itself
            LOG.exception("wake-up listener stopped")
        finally:
            # No more wake-ups will come: every head re-checks, and polls from now on.
            self._polling.set()
            self._listen_to_siblings()
            self._wake_everyone()

    def _listen_to_siblings(self) -> None:
        """Without the store's wake-ups, take those of the server's other workers."""
        siblings = sibling_wakeups.joined()
        if siblings is not None:
            siblings.listen(self._wake_head)

    def _renew(self) -> None:
        """Keep writers sending wake-ups for every queue with a line here, while heads sleep
        past the announcement's lifetime; ends with the listener (its driver closed)."""
        assert self._listener is not None
        while not self._stop.wait(ANNOUNCE_EVERY_S) and self._listener.is_alive():
            self._forget_lapsed_announcements()
            with self._lock:
                queues = [(line[0].project, line[0].queue) for line in self._lines.values()]
            for project, queue in queues:
                try:
                    self.announce(project, queue)
                except StorageUnavailable:  # the next round tries again
                    LOG.debug("announcing wake-ups for %s/%s failed", project, queue)
                except Exception:  # a bug: keep renewing the other lines
                    LOG.exception("announcing wake-ups for %s/%s failed", project, queue)

    def _forget_lapsed_announcements(self) -> None:
        """Forget when queues without a line were announced, once that announcement lapsed:
        a claim that waits on a new queue name each time must not grow the process without
        bound, and a line that forms again announces at once."""
        lapsed_before = time.monotonic() - ANNOUNCE_TTL_MS / 1000
        with self._lock:
            # list(): announce() adds entries without the lock.
            for channel, announced in list(self._announced.items()):
                if announced < lapsed_before and channel not in self._lines:
                    self._announced.pop(channel, None)

    def announced(self) -> int:
        """How many queues the process remembers announcing: those with a line, and others
        until a renewal period after their announcement lapsed."""
        return len(self._announced)

    def written(self, project: str, queue: str) -> None:
        """This process made the queue's messages claimable (a post, a release, a
        reschedule). A store with wake-ups tells every process itself; without them, the
        head of this process's line is woken here, and those of the server's other workers
        through ``sibling_wakeups``; processes of other servers find the messages at their
        next re-check (``RECHECK_WITHOUT_WAKEUPS_S``)."""
        if self._wakeups is None or self._polling.is_set():
            channel = self._channel(project, queue)
            self._wake_head(channel)
            siblings = sibling_wakeups.joined()
            if siblings is not None:
                siblings.tell(channel)

    def _channel(self, project: str, queue: str) -> str:
        """The name of the queue's line: the store's wake-up channel, when it has wake-ups."""
        return self._wakeups.channel(project, queue) if self._wakeups else f"{project}/{queue}"

    def _wake_head(self, channel: str) -> None:
        seat = self.head(channel)
        if seat is not None:
            seat.wake()

    def _wake_everyone(self) -> None:
        """After a (re)connection wake-ups may have been missed: every head re-checks."""
        self._listening.set()
        self._announced.clear()
        with self._lock:
            heads = [line[0] for line in self._lines.values() if line]
        for seat in heads:
            seat.wake()


class WaitRooms:
    """One :class:`WaitRoom` per store, each listening to that store's wake-ups: with pools,
    a queue's waiting claims are woken by the pool it lives on."""

    def __init__(self, clock: Clock, most_per_project: int = 0) -> None:
        """``most_per_project``: the waiting claims one project may have in the process, over
        every store (0: no limit)."""
        self._clock = clock
        self._lock = threading.Lock()
        self._rooms: dict[int, tuple[Driver, WaitRoom]] = {}
        self._seats = ProjectSeats(most_per_project)

    def of(self, store: Driver) -> WaitRoom:
        """The room of the queues on ``store`` (made, with its listener, when first asked)."""
        with self._lock:
            known = self._rooms.get(id(store))
            if known is None or known[0] is not store:
                room = WaitRoom(
                    store.wakeups(), self._clock, store.waiting_claim_relay, self._seats
                )
                known = (store, room)
                self._rooms[id(store)] = known
            return known[1]
