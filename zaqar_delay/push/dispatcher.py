"""The dispatcher: finds due pushes in the store, sends them and records each outcome.

Every server process runs one. Leases in the store keep two dispatchers from sending one push
at once, and make a push due again when its dispatcher dies mid-send, so delivery is at least
once and survives ``kill -9`` of any process. A failed attempt is retried by the
``_retry_policy`` schedule (``retry_policy``); a push that fails for good, or runs out of
retries, moves its message to the queue's ``_dead_letter_queue`` when it has one.

Pushes flow: the dispatcher leases only as many pushes as it has free request slots
(``concurrency``), and each push is settled in the store as soon as its own request ends. So
a slow receiver holds only its own slots, not the other queues' pushes, and a crash repeats at
most the requests that were in flight.

The dispatcher sleeps until the earliest owed push, at most ``recheck_s``; a post in this
process that owes an earlier push wakes it at once (``notify``), as does a freed slot.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading

from zaqar_delay import jsondoc, retry_policy
from zaqar_delay.clock import Clock
from zaqar_delay.errors import StorageUnavailable
from zaqar_delay.lifecycle import Lifecycle
from zaqar_delay.models import Delivery, NewMessage
from zaqar_delay.policy import QueuePolicy
from zaqar_delay.push.senders import Senders
from zaqar_delay.push.webhook import Outcome, message_document
from zaqar_delay.storage.base import Driver

LOG = logging.getLogger(__name__)

QUEUES_PER_ROUND = 32
RECHECK_S = 1.0


class Dispatcher:
    """Sends the pushes the store owes, with ``concurrency`` requests in flight at most."""

    def __init__(
        self,
        driver: Driver,
        clock: Clock,
        sender: Senders,
        concurrency: int = 32,
        recheck_s: float = RECHECK_S,
        lifecycle: Lifecycle | None = None,
        require_confirmation: bool = False,
    ) -> None:
        """A lease lasts three push timeouts: the request, then its settling, with room to
        spare. Every attempt is reported to ``lifecycle`` (metrics and journal). With
        ``require_confirmation``, a push that falls due while its subscription is unconfirmed
        is dropped unsent."""
        self.require_confirmation = require_confirmation
        self.driver = driver
        self.lifecycle = lifecycle
        self.lease_ms = int(sender.timeout_s * 3000)
        self.clock = clock
        self.sender = sender
        self.recheck_s = recheck_s
        self.concurrency = concurrency
        self._pool = concurrent.futures.ThreadPoolExecutor(concurrency, "zaqar-delay-push")
        self._in_flight = 0
        self._in_flight_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- running -------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name="zaqar-delay-dispatcher", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)
        self._pool.shutdown(wait=False)
        self.sender.close()

    def notify(self, due_ms: int) -> None:
        """A post owes pushes due at ``due_ms``: look again now (cheap when it is later)."""
        if due_ms:
            self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._free_slots() == 0:
                    # Every slot busy: the next freed one wakes this loop.
                    self._wake.wait(self.recheck_s)
                    self._wake.clear()
                elif not self._lease_round():
                    self._sleep()
            except StorageUnavailable as exc:
                LOG.warning("push delivery waits for the store: %s", exc.description)
                self._stop.wait(self.recheck_s)
            except Exception:
                LOG.exception("push delivery round failed")
                self._stop.wait(self.recheck_s)

    def _sleep(self) -> None:
        now_ms = self.clock.now_ms()
        next_ms = self.driver.next_push_ms()
        sleep_s = self.recheck_s
        if next_ms is not None:
            sleep_s = min(sleep_s, max(0.0, (next_ms - now_ms + 1) / 1000))
        if sleep_s > 0 and self._wake.wait(sleep_s):
            self._wake.clear()

    # -- leasing -------------------------------------------------------------------------------

    def run_once(self) -> int:
        """Send the pushes due now, up to the free slots, and wait for their outcomes to be
        recorded; returns how many were attempted."""
        attempts = self._lease_round()
        concurrent.futures.wait(attempts)
        for attempt in attempts:
            attempt.result()
        return len(attempts)

    def _free_slots(self) -> int:
        with self._in_flight_lock:
            return self.concurrency - self._in_flight

    def _take_slots(self, n: int) -> None:
        with self._in_flight_lock:
            self._in_flight += n

    def _lease_round(self) -> list[concurrent.futures.Future[None]]:
        """Lease due pushes (oldest queues first) into the free slots and start each."""
        now_ms = self.clock.now_ms()
        started: list[concurrent.futures.Future[None]] = []
        for project, queue in self.driver.due_push_queues(now_ms, QUEUES_PER_ROUND):
            free = self._free_slots()
            if free == 0:
                break
            leased = self.driver.lease_pushes(project, queue, now_ms, self.lease_ms, free)
            self._take_slots(len(leased))
            started += [self._pool.submit(self._attempt, delivery) for delivery in leased]
        return started

    # -- one push ------------------------------------------------------------------------------

    def _attempt(self, delivery: Delivery) -> None:
        """Send one push and record its outcome; the slot is freed whatever happens (a push
        not settled is due again when its lease ends)."""
        try:
            if self.require_confirmation and not delivery.subscription.confirmed:
                now_ms = self.clock.now_ms()
                self.driver.settle_pushes(
                    delivery.project, delivery.queue, [(delivery, None)], now_ms
                )
                return
            sent_ms = self.clock.now_ms()
            outcome = self.sender.send(delivery, sent_ms)
            self._settle(delivery, outcome, sent_ms)
        except StorageUnavailable as exc:
            LOG.warning("push %s not recorded, sent again later: %s", delivery.id, exc)
        except Exception:
            LOG.exception("push %s failed unexpectedly; sent again later", delivery.id)
        finally:
            self._take_slots(-1)
            self._wake.set()

    def _settle(self, delivery: Delivery, outcome: Outcome, sent_ms: int) -> None:
        project, queue = delivery.project, delivery.queue
        metadata = self.driver.get_metadata(project, queue) or {}
        policy = QueuePolicy.of(metadata)
        now_ms = self.clock.now_ms()
        retry_at = self._retry_at(delivery, outcome, metadata, now_ms)
        dead_letter_queue = ""
        if retry_at is None and outcome.kind != "delivered":
            LOG.warning(
                "push %s to %s failed for good after %d attempts: %s",
                delivery.id,
                delivery.subscription.subscriber,
                delivery.attempts + 1,
                outcome.error,
            )
            if policy.dead_letter_queue:
                dead_letter_queue = policy.dead_letter_queue
                self._dead_letter(delivery, outcome, dead_letter_queue, now_ms)
        if self.lifecycle is not None:
            kind = "delivered" if outcome.kind == "delivered" else "failed"
            kind = "retry" if retry_at is not None else kind
            self.lifecycle.pushed(delivery, kind, outcome.error, dead_letter_queue, sent_ms)
        consume = [delivery.id] if outcome.kind == "delivered" and policy.delete_after_push else []
        self.driver.settle_pushes(project, queue, [(delivery, retry_at)], now_ms, consume)

    @staticmethod
    def _retry_at(
        delivery: Delivery, outcome: Outcome, metadata: dict[str, object], now_ms: int
    ) -> int | None:
        if outcome.kind != "retry":
            return None
        delays = retry_policy.retry_delays_s(
            retry_policy.effective(delivery.subscription.options, metadata)
        )
        if delivery.attempts >= len(delays):
            return None
        wait_s = max(delays[delivery.attempts], outcome.retry_after_s)
        return now_ms + int(wait_s * 1000)

    def _dead_letter(self, delivery: Delivery, outcome: Outcome, target: str, now_ms: int) -> None:
        """The message, with the subscription, attempts and last error, in ``target`` (once,
        also when a crash makes this dispatcher or another repeat it: the delivery id is the
        dead-letter message's dedup id)."""
        document = {
            "message": message_document(delivery, now_ms),
            "subscription_id": delivery.subscription.id,
            "subscriber": delivery.subscription.subscriber,
            "attempts": delivery.attempts + 1,
            "last_error": outcome.error,
        }
        message = NewMessage(
            jsondoc.dumps(document), delivery.message.ttl_s, 0, f"push:{delivery.id}"
        )
        client = "zaqar-delay-push"
        self.driver.post_messages(delivery.project, target, [message], client, now_ms)
