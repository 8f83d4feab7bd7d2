"""Settling push attempts: what each outcome means for its push (delivered, retried at a
time of its retry policy, failed for good and moved to the dead-letter queue), recorded in one
store call per queue and reported to the lifecycle (metrics and journal).
"""

from __future__ import annotations

import dataclasses
import logging

from zaqar_delay import retry_policy
from zaqar_delay.clock import Clock
from zaqar_delay.errors import StorageUnavailable
from zaqar_delay.lifecycle import Lifecycle
from zaqar_delay.models import Delivery, PushResult, Settlement
from zaqar_delay.policy import QueuePolicy
from zaqar_delay.push.subscribers import redacted
from zaqar_delay.push.webhook import Outcome, message_document
from zaqar_delay.push_door import DEAD_LETTER_CLIENT_ID, PushDoor
from zaqar_delay.schedules.names import SCHEDULE_SUBSCRIBER, TICK_RETRIES

LOG = logging.getLogger(__name__)
# The dispatcher's outcomes of pushes it did not send: dropped (the subscription is not
# confirmed), or given back, owed again at their time (the dispatcher stopped first, or leased
# them too late to send).
NOT_SENT = ("unconfirmed", "unsent")
# Characters of an error kept as a subscription's last push result.
MAX_RESULT_DETAIL = 200


@dataclasses.dataclass(frozen=True, slots=True)
class Attempt:
    """A request that ended: its push, what came of it, when it was sent, and the request
    slots it frees (a batch of ticks holds one, freed by its first attempt)."""

    delivery: Delivery
    outcome: Outcome
    sent_ms: int
    slots: int = 1


class Settler:
    """Settles the attempts of one dispatcher through the service's ``pushes`` door."""

    def __init__(self, pushes: PushDoor, lifecycle: Lifecycle, clock: Clock) -> None:
        self.pushes = pushes
        self.lifecycle = lifecycle
        self.clock = clock

    def settle(self, project: str, queue: str, attempts: list[Attempt]) -> None:
        """Record the attempts of one queue in one store call, report each (metrics,
        journal, dead letters), and keep each subscription's last result."""
        now_ms = self.clock.now_ms()
        outcomes: list[tuple[Delivery, int | None]] = []
        consume: list[str] = []
        unsent: list[str] = []
        for attempt in attempts:
            delivery, outcome = attempt.delivery, attempt.outcome
            if outcome.kind in NOT_SENT:
                # Not an attempt, nothing to report: owed again at its time, or dropped.
                given_back = outcome.kind == "unsent"
                outcomes.append((delivery, delivery.owed_ms if given_back else None))
                unsent += [delivery.id] if given_back else []
                continue
            retry_at = self._retry_at(delivery, outcome, now_ms)
            outcomes.append((delivery, retry_at))
            policy = QueuePolicy.of(delivery.queue_metadata)
            if outcome.kind == "delivered" and policy.delete_after_push:
                consume.append(delivery.id)
            self._report(attempt, retry_at, policy, now_ms)
        settlement = Settlement(outcomes, consume, unsent)
        self.pushes.settle_pushes(project, queue, settlement, now_ms)
        self._record_last(project, queue, attempts)
        self._end_gone(project, queue, attempts)

    def _end_gone(self, project: str, queue: str, attempts: list[Attempt]) -> None:
        """Delete the subscriptions whose subscriber is gone for good (a WebSocket session
        that ended): the pushes owed to them are dropped with them. A store failure here is
        logged; the next push that finds the subscriber gone tries again."""
        gone = {a.delivery.subscription.id for a in attempts if a.outcome.subscriber_gone}
        for subscription_id in sorted(gone):
            try:
                self.pushes.delete_subscription(project, queue, subscription_id)
            except StorageUnavailable as exc:
                LOG.warning(
                    "subscription %s of %s/%s, whose subscriber is gone, not deleted: %s",
                    subscription_id,
                    project,
                    queue,
                    exc,
                )

    def _record_last(self, project: str, queue: str, attempts: list[Attempt]) -> None:
        """Keep each subscription's last attempt of the batch for its readers (the API, the
        dashboard). Only informative: a store failure here is logged, and the pushes, already
        settled, are not sent again."""
        last: dict[str, PushResult] = {}
        for attempt in sorted(attempts, key=lambda a: a.sent_ms):
            outcome = attempt.outcome
            if outcome.kind not in NOT_SENT:
                detail = outcome.error[:MAX_RESULT_DETAIL]
                last[attempt.delivery.subscription.id] = PushResult(
                    attempt.sent_ms, outcome.kind, detail
                )
        try:
            self.pushes.record_push_results(project, queue, list(last.items()))
        except StorageUnavailable as exc:
            LOG.warning("last push results of %s/%s not recorded: %s", project, queue, exc)

    def _report(
        self, attempt: Attempt, retry_at: int | None, policy: QueuePolicy, now_ms: int
    ) -> None:
        """Metrics and journal of one attempt; a push failed for good goes to the queue's
        dead-letter queue, if it has one."""
        delivery, outcome = attempt.delivery, attempt.outcome
        dead_letter_queue = ""
        if retry_at is None and outcome.kind != "delivered":
            LOG.warning(
                "push %s to %s failed for good after %d attempts: %s",
                delivery.id,
                redacted(delivery.subscription.subscriber),
                delivery.attempts + 1,
                outcome.error,
            )
            if self._dead_letters(delivery, outcome, policy):
                dead_letter_queue = str(policy.dead_letter_queue)
                self._dead_letter(delivery, outcome, dead_letter_queue, now_ms)
        kind = "delivered" if outcome.kind == "delivered" else "failed"
        kind = "retry" if retry_at is not None else kind
        self.lifecycle.pushed(delivery, kind, outcome.error, dead_letter_queue, attempt.sent_ms)

    @staticmethod
    def _dead_letters(delivery: Delivery, outcome: Outcome, policy: QueuePolicy) -> bool:
        """Whether a push that failed for good goes to the queue's dead-letter queue: not
        when its subscriber is gone (the subscription ends; the message stays for the
        others), nor when it is the push of a dead letter (one from the dead-letter queue's
        own subscriptions, or around a cycle of dead-letter queues), nor when the queue is
        its own dead-letter queue (metadata no longer accepted). Each would be pushed, fail
        and be dead-lettered again, without end; one subscription more on the way would
        double them each time round. The dead letter stays in its queue."""
        target = policy.dead_letter_queue
        if not target or target == delivery.queue or outcome.subscriber_gone:
            return False
        return delivery.message.client_id != DEAD_LETTER_CLIENT_ID

    @staticmethod
    def _retry_at(delivery: Delivery, outcome: Outcome, now_ms: int) -> int | None:
        if outcome.kind != "retry":
            return None
        if delivery.subscription.subscriber == SCHEDULE_SUBSCRIBER:
            policy = TICK_RETRIES
        else:
            policy = retry_policy.effective(delivery.subscription.options, delivery.queue_metadata)
        delay_s = retry_policy.retry_delay_s(policy, delivery.attempts)
        if delay_s is None:
            return None
        return now_ms + int(max(delay_s, outcome.retry_after_s) * 1000)

    def _dead_letter(self, delivery: Delivery, outcome: Outcome, target: str, now_ms: int) -> None:
        """The message, with the subscription, attempts and last error, in ``target`` (once,
        also when a crash makes this dispatcher or another repeat it)."""
        document = {
            "message": message_document(delivery, now_ms),
            "subscription_id": delivery.subscription.id,
            "subscriber": redacted(delivery.subscription.subscriber),
            "attempts": delivery.attempts + 1,
            "last_error": outcome.error,
        }
        self.pushes.dead_letter_push(delivery, target, document, now_ms)
