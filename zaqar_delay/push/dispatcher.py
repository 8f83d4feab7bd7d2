"""The dispatcher: finds owed pushes in the store, sends each at its time and records each
outcome.

Every server process runs one. Leases in the store keep two dispatchers from sending one push
at once, and make a push due again when its dispatcher dies mid-send, so delivery is at least
once and survives ``kill -9`` of any process. A failed attempt is retried by the
``_retry_policy`` schedule (``retry_policy``); a push that fails for good, or runs out of
retries, moves its message to the queue's ``_dead_letter_queue`` when it has one.

Messages leave the store, and dead letters enter it, through the service
(``Service.lease_pushes``, ``Service.dead_letter_push``), the one door that applies each queue's
policy: a subscriber of an encrypted queue is sent the body its producer posted, and a dead
letter is sealed, journaled, counted and pushed on like any post.

Pushes flow: the dispatcher leases only as many pushes as it has free request slots
(``concurrency``), the pushes owed within the next ``lease_ahead_ms`` included, and each is
sent at its owed time, never before: the store is asked once per batch, not once per push,
and the send does not wait for a store round trip. Outcomes are settled in batches, one store
call per queue, by a thread of their own, at most ``settle_every_s`` after their requests end
(plus the store calls of the batch before): never behind a lease round, which on a slow store
can take as long as a lease, so the outcome of a push is recorded before its lease runs out
and it is not sent again. Only then are their slots free again, and the lease loop is woken.
So a slow receiver holds only its own slots, not the other queues' pushes, and a crash
repeats at most ``concurrency`` pushes. Schedules' ticks are not requests: a tick queue's due
ticks are leased together (``tick_batches.py``), fired in one call in this process
(``Schedules.fire_many``), and hold one slot between them. When the server process stops,
its dispatchers stop (:meth:`Dispatcher.stop`) and settle what they sent: a push its receiver
took just before the stop is not sent again, and one leased ahead but not yet sent is given
back, owed at once to the other processes rather than when its lease ends.

When a round leases nothing the dispatcher sleeps until the earliest owed push (less
``lease_ahead_ms``), at most ``recheck_s``; a post in this process that owes an earlier push
wakes it at once (``notify``), and so does the settler when it frees slots.

Projects are served fairly: each lease round gives the free slots first to the projects with
the fewest pushes in flight, each at most its share. The bound: a push of a project with
nothing in flight, owed at T, is leased in the first round after ``T - lease_ahead_ms`` in
which a slot is free. The settler wakes the lease loop as soon as it frees slots, so another
project's backlog delays it by at most the time until one of that backlog's requests ends
(``[notification] push_timeout`` at worst, the receiver's answer time in general) plus
``settle_every_s`` and the settling store call, as long as its queue is among the
``QUEUES_PER_ROUND`` queues owing the oldest pushes.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time

from zaqar_delay import stopping
from zaqar_delay.errors import StorageUnavailable
from zaqar_delay.models import Delivery
from zaqar_delay.push.lease_length import LeaseLength
from zaqar_delay.push.senders import Senders
from zaqar_delay.push.settling import Attempt, Settler
from zaqar_delay.push.tick_batches import TICK_LEASE_MS, TickBatches
from zaqar_delay.push.webhook import Outcome
from zaqar_delay.schedules.names import is_tick_queue
from zaqar_delay.service import Service

LOG = logging.getLogger(__name__)
# Queues owing pushes read per lease round, oldest first: the projects served fairly are
# those among them.
QUEUES_PER_ROUND = 128
RECHECK_S = 1.0
LEASE_AHEAD_MS = 50
SETTLE_EVERY_S = 0.005
WAIT_SLICE_S = 0.05


class Dispatcher:
    """Sends the pushes the store owes, with ``concurrency`` requests in flight at most."""

    def __init__(
        self,
        service: Service,
        sender: Senders,
        concurrency: int = 32,
        recheck_s: float = RECHECK_S,
        require_confirmation: bool = False,
        lease_ahead_ms: int = LEASE_AHEAD_MS,
        settle_every_s: float = SETTLE_EVERY_S,
    ) -> None:
        """Pushes leave the store, and failed ones go to their dead-letter queue, through
        ``service``, which applies each queue's policy (encryption, journal, metrics); the
        push bookkeeping (owed, leased, settled) is the service's store's. A lease lasts three
        push timeouts past the push's time: the request, then its settling, with room to
        spare. Every attempt is reported to the service's lifecycle (metrics and journal).
        With ``require_confirmation``, a push that falls due while its subscription is
        unconfirmed is dropped unsent."""
        self.require_confirmation = require_confirmation
        self.service = service
        self.settler = Settler(service.pushes, service.lifecycle, service.clock)
        self.lease_length = LeaseLength(int(sender.timeout_s * 1000))
        self.lease_ms = self.lease_length.base_ms  # a slow store's leases are longer
        self.lease_ahead_ms = lease_ahead_ms
        self.settle_every_s = settle_every_s
        self.clock = service.clock
        self.sender = sender
        self.recheck_s = recheck_s
        self.concurrency = concurrency
        self._pool = concurrent.futures.ThreadPoolExecutor(concurrency, "zaqar-delay-push")
        self._in_flight = 0
        self._in_flight_by_project: collections.Counter[str] = collections.Counter()
        self._in_flight_lock = threading.Lock()
        self._ended: list[Attempt] = []
        self._attempts_ended = threading.Event()
        self._tick_batches = TickBatches()
        # While the loop sleeps: when it leases next (ms); None while it is awake.
        self._sleeping_until: int | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._settling: threading.Thread | None = None

    # -- running -------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name="zaqar-delay-dispatcher", daemon=True
        )
        self._thread.start()
        self._settling = threading.Thread(
            target=self._settle_loop, name="zaqar-delay-settler", daemon=True
        )
        self._settling.start()
        stopping.track(self, Dispatcher.stop)

    def stop(self) -> None:
        """Lease nothing more, give back the pushes waiting for their time, wait up to a push
        timeout for the requests in flight, and settle all: each push is then owed to the
        other dispatchers at once, never sent twice by this one."""
        stopping.forget(self)
        self._stop.set()
        self._wake.set()
        self._attempts_ended.set()
        for thread in (self._thread, self._settling):
            if thread is not None:
                thread.join(10)
        deadline = time.monotonic() + self.sender.timeout_s
        while self._sending() and time.monotonic() < deadline:
            time.sleep(0.02)
        try:
            self._settle_ended()
        except Exception:  # the store is down: those pushes are sent again when leases end
            LOG.exception("settling pushes at the stop failed; they are sent again later")
        self._pool.shutdown(wait=False)
        self.sender.close()

    def _sending(self) -> bool:  # whether slots are held by attempts that have not ended
        with self._in_flight_lock:
            return self._in_flight > sum(attempt.slots for attempt in self._ended)

    def notify(self, due_ms: int) -> None:
        """A post or an edit owes pushes due at ``due_ms`` (0: none): look again now, unless
        the loop sleeps and leases by then anyway (most posts: it saves two store calls)."""
        sleeping_until = self._sleeping_until
        if due_ms and (sleeping_until is None or due_ms < sleeping_until):
            self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                free = self._free_slots()
                if free and self._lease_round(ahead=True):
                    continue
                if free:
                    self._sleep()
                else:
                    # Every slot in flight: the settler wakes this loop when it frees some.
                    self._sleep_until(self.clock.now_ms(), self.recheck_s)
            except StorageUnavailable as exc:
                LOG.warning("push delivery waits for the store: %s", exc.description)
                self._stop.wait(self.recheck_s)
            except Exception:
                LOG.exception("push delivery round failed")
                self._stop.wait(self.recheck_s)

    def _sleep(self) -> None:
        """Until the earliest owed push less the lease-ahead time, at most ``recheck_s``."""
        now_ms = self.clock.now_ms()
        next_ms = self.service.pushes.next_push_ms()
        sleep_s = self.recheck_s
        if next_ms is not None:
            sleep_s = min(sleep_s, max(0.0, (next_ms - self.lease_ahead_ms - now_ms) / 1000))
        self._sleep_until(now_ms, sleep_s)

    def _sleep_until(self, now_ms: int, sleep_s: float) -> None:
        if sleep_s <= 0:
            return
        # Set before the wait, after the store was read: a post that lowered the index since
        # then compares its due time with this and wakes the loop when it is earlier.
        self._sleeping_until = now_ms + int(sleep_s * 1000)
        try:
            if self._wake.wait(sleep_s):
                self._wake.clear()
        finally:
            self._sleeping_until = None

    # -- leasing -------------------------------------------------------------------------------

    def run_once(self) -> int:
        """Send the pushes due now (none ahead), up to the free slots, and wait for their
        outcomes to be recorded; returns how many were attempted."""
        started = self._lease_round(ahead=False)
        concurrent.futures.wait(started)
        for future in started:
            future.result()
        return sum(attempt.outcome.kind != "unsent" for attempt in self._settle_ended())

    def _free_slots(self) -> int:
        with self._in_flight_lock:
            return self.concurrency - self._in_flight

    def _take_slots(self, project: str, n: int) -> None:
        with self._in_flight_lock:
            self._in_flight += n
            self._in_flight_by_project[project] += n
            if self._in_flight_by_project[project] <= 0:
                del self._in_flight_by_project[project]

    def _projects_in_flight(self) -> dict[str, int]:
        with self._in_flight_lock:
            return dict(self._in_flight_by_project)

    def _lease_round(self, ahead: bool) -> list[concurrent.futures.Future[None]]:
        """Lease owed pushes into the free slots and start each; with ``ahead``, those owed
        within the lease-ahead time too.

        Projects are served fairly: of the queues owing pushes (oldest first), those of the
        projects with the fewest pushes in flight lease first, each project at most its
        share of the free slots; what is left then goes, in the same order, to the queues
        that had more. So one project's backlog, however large, holds the slots it has, and
        another project's push takes the first slot that frees (see the module's docstring
        for the bound)."""
        now_ms = self.clock.now_ms()
        until_ms = now_ms + (self.lease_ahead_ms if ahead else 0)
        due = self.service.pushes.due_push_queues(until_ms, QUEUES_PER_ROUND)
        in_flight = self._projects_in_flight()
        # sorted() is stable: within a project, and among equals, the oldest queue first.
        due.sort(key=lambda owed: in_flight.get(owed[0], 0))
        free = self._free_slots()
        share = -(-free // max(1, len({project for project, _ in due})))  # rounded up
        leased_by_project: collections.Counter[str] = collections.Counter()
        started: list[concurrent.futures.Future[None]] = []
        more: list[tuple[str, str]] = []
        for project, queue in due:
            allowed = min(self._free_slots(), share - leased_by_project[project])
            if allowed <= 0:
                more.append((project, queue))
                continue
            leased = self._lease(project, queue, now_ms, allowed, until_ms, started)
            leased_by_project[project] += leased
            if leased == allowed:
                more.append((project, queue))
        for project, queue in more:
            free = self._free_slots()
            if free == 0:
                break
            self._lease(project, queue, now_ms, free, until_ms, started)
        return started

    def _lease(
        self,
        project: str,
        queue: str,
        now_ms: int,
        limit: int,
        until_ms: int,
        started: list[concurrent.futures.Future[None]],
    ) -> int:
        """Lease up to ``limit`` pushes of the queue and start each (into ``started``): the
        request slots they take. A tick queue's ticks are leased up to its batch size
        (``TickBatches``) and fired together, in one slot: they are one call in this
        process, not requests."""
        if is_tick_queue(queue):
            lease_ms = min(self.lease_ms, TICK_LEASE_MS)
            batch = self._tick_batches.size(project, queue)
            ticks = self.service.pushes.lease_pushes(
                project, queue, now_ms, lease_ms, batch, until_ms
            )
            if not ticks:
                return 0
            self._take_slots(project, 1)
            started.append(self._pool.submit(self._attempt_ticks, ticks, lease_ms))
            return 1
        lease_ms = self.lease_length.lease_ms()
        called_ms = self.clock.now_ms()
        leased = self.service.pushes.lease_pushes(project, queue, now_ms, lease_ms, limit, until_ms)
        answered_ms = self.clock.now_ms()
        took_ms = answered_ms - called_ms
        self.lease_length.record(took_ms)
        self._take_slots(project, len(leased))
        if leased and not self.lease_length.enough_left(until_ms + lease_ms - answered_ms):
            LOG.warning("%d pushes leased too late to send (in %d ms)", len(leased), took_ms)
            # Given back unsent, owed again at once: the next lease is longer.
            self._ended_all([Attempt(d, Outcome("unsent"), answered_ms) for d in leased])
            return 0
        started += [self._pool.submit(self._attempt, delivery) for delivery in leased]
        return len(leased)

    # -- one push ------------------------------------------------------------------------------

    def _attempt(self, delivery: Delivery) -> None:
        """Send one push at its time and queue its outcome for settling; one whose time has
        not come when the dispatcher stops is given back (``unsent``), owed again at once to
        the other dispatchers. A push not settled (this process died, or the store failed) is
        due again when its lease ends."""
        try:
            stopped = not self._wait_for(delivery.owed_ms)
            sent_ms = self.clock.now_ms()
            if stopped:
                outcome = Outcome("unsent")
            elif self.require_confirmation and not delivery.subscription.confirmed:
                outcome = Outcome("unconfirmed")
            else:
                outcome = self.sender.send(delivery, sent_ms)
        except Exception:
            LOG.exception("push %s failed unexpectedly; sent again later", delivery.id)
            self._take_slots(delivery.project, -1)
        else:
            self._ended_all([Attempt(delivery, outcome, sent_ms)])

    def _attempt_ticks(self, ticks: list[Delivery], lease_ms: int) -> None:
        """Fire schedules' ticks of one queue together (they share their store calls), and
        queue their outcomes for settling. They fire when leased, up to ``lease_ahead_ms``
        before they are owed: a tick is owed well ahead of its slot (``LEAD_MS``) and posts
        its message due at the slot, so firing it early changes nothing a client sees, and
        it frees its request slot sooner."""
        try:
            sent_ms = self.clock.now_ms()
            outcomes = self.sender.schedules.send_many(ticks, sent_ms)
        except Exception:
            LOG.exception("%d ticks failed unexpectedly; fired again later", len(ticks))
            self._take_slots(ticks[0].project, -1)
        else:
            self._tick_batches.fired(ticks, self.clock.now_ms() - sent_ms, lease_ms)
            self._ended_all(
                [
                    Attempt(tick, outcome, sent_ms, slots=int(index == 0))
                    for index, (tick, outcome) in enumerate(zip(ticks, outcomes, strict=True))
                ]
            )

    def _ended_all(self, attempts: list[Attempt]) -> None:
        """Queue these attempts for the settler (their slots are freed once settled)."""
        with self._in_flight_lock:
            self._ended += attempts
        self._attempts_ended.set()

    def _wait_for(self, owed_ms: int) -> bool:
        """Sleep until ``owed_ms`` has come on the clock (False: the dispatcher stopped first).
        The clock is read again at least every ``WAIT_SLICE_S``: a clock set while this waits
        (a step of the system clock, the tests' fake one) is followed."""
        while True:
            left_ms = owed_ms - self.clock.now_ms()
            if left_ms <= 0:
                return True
            if self._stop.wait(min(left_ms / 1000, WAIT_SLICE_S)):
                return False

    def _settle_loop(self) -> None:
        """Settle attempts as they end, ``settle_every_s`` after the first of a batch (the
        others ending meanwhile join it), and wake the lease loop into the slots they free."""
        while not self._stop.is_set():
            if not self._attempts_ended.wait(self.recheck_s):
                continue
            if self._stop.wait(self.settle_every_s):
                return
            self._attempts_ended.clear()
            try:
                if self._settle_ended():
                    self._wake.set()
            except Exception:
                LOG.exception("settling pushes failed; they are sent again later")

    def _settle_ended(self) -> list[Attempt]:
        """Record the outcomes of the requests that ended, one store call per queue, and free
        their slots (also when the store fails: those pushes are sent again later); those
        that ended."""
        with self._in_flight_lock:
            ended, self._ended = self._ended, []
        by_queue: dict[tuple[str, str], list[Attempt]] = collections.defaultdict(list)
        for attempt in ended:
            by_queue[attempt.delivery.project, attempt.delivery.queue].append(attempt)
        try:
            for (project, queue), attempts in by_queue.items():
                called_ms = self.clock.now_ms()
                self.settler.settle(project, queue, attempts)
                self.lease_length.record(self.clock.now_ms() - called_ms)
        except StorageUnavailable as exc:
            LOG.warning("%d pushes not recorded, sent again later: %s", len(ended), exc)
        finally:
            for attempt in ended:
                self._take_slots(attempt.delivery.project, -attempt.slots)
        return ended
