"""What the service reports of each message event: metrics and the lifecycle journal, behind
one call per use case, so a use case's side effects read as one line."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from zaqar_delay.journal import NullJournal
from zaqar_delay.metrics import Metrics
from zaqar_delay.models import Delivery, Fire, Message, MessageEdit, NewMessage, Posted


class Lifecycle:
    """Counts events in ``metrics`` and writes them to ``journal`` (a NullJournal when off)."""

    def __init__(self, metrics: Metrics, journal: NullJournal) -> None:
        self.metrics = metrics
        self.journal = journal
        journal.on_lost = metrics.count_journal_lost
        # Told when a post owes pushes, or an edit brings them forward (the push dispatcher of
        # this process, when it runs).
        self.pushes_owed: Callable[[int], None] = lambda due_ms: None

    @property
    def wants_released_ids(self) -> bool:
        """Whether :meth:`released` uses the ids (only the journal does; reading them costs a
        store call)."""
        return self.journal.enabled

    def posted(
        self,
        project: str,
        queue: str,
        posted: Posted,
        messages: Sequence[NewMessage],
        now_ms: int,
    ) -> None:
        """Count the messages the post stored; journal them, and its repeats (messages an
        earlier post stored, whose lines that post may not have written: its answer lost)."""
        stored = posted.stored()
        self.pushes_owed(posted.push_due_ms)
        self.metrics.count_posted(project, queue, len(stored))
        self.journal.posted(project, queue, posted.ids, messages, stored, now_ms, posted.duplicates)

    def claimed(
        self, project: str, queue: str, claim_id: str, messages: Sequence[Message], now_ms: int
    ) -> None:
        self.metrics.observe_claimed(project, queue, messages)
        self.journal.claimed(project, queue, claim_id, messages, now_ms)

    def popped(self, project: str, queue: str, messages: Sequence[Message], now_ms: int) -> None:
        """A pop is a delivery and a delete at once."""
        self.metrics.observe_claimed(project, queue, messages)
        if messages:
            self.metrics.count_deleted(project, queue, len(messages))
            self.journal.claimed(project, queue, None, messages, now_ms)
            self.journal.deleted(project, queue, [m.id for m in messages], None, now_ms, ())

    def deleted(
        self,
        project: str,
        queue: str,
        named: Sequence[str],
        removed: Sequence[str],
        claim_id: str | None,
        now_ms: int,
    ) -> None:
        """A delete of the messages ``named``, of which the store removed ``removed``. The
        others were gone already: a retried delete, one after a pop, or the retry of a delete
        whose answer was lost, which only then is journaled (a repeat, as a post's; the
        metrics count what this request removed)."""
        done = set(removed)
        repeats = [i for i in dict.fromkeys(named) if i not in done]
        if removed:  # a delete that removed nothing adds no series
            self.metrics.count_deleted(project, queue, len(removed))
        self.journal.deleted(project, queue, removed, claim_id, now_ms, repeats)

    def released(
        self, project: str, queue: str, claim_id: str, ids: Sequence[str], now_ms: int
    ) -> None:
        self.journal.released(project, queue, claim_id, ids, now_ms)

    def rescheduled(self, project: str, queue: str, edit: MessageEdit, now_ms: int) -> None:
        self.journal.rescheduled(project, queue, edit, now_ms)

    def edited(self, project: str, queue: str, edit: MessageEdit, now_ms: int) -> None:
        self.journal.edited(project, queue, edit, now_ms)

    def pushed(
        self, delivery: Delivery, outcome: str, error: str, dead_letter_queue: str, now_ms: int
    ) -> None:
        """A push attempt: ``outcome`` delivered, retry or failed (for good; moved to
        ``dead_letter_queue`` when it is not empty)."""
        message = delivery.message
        first_late = now_ms - message.due_ms if delivery.attempts == 0 else None
        self.metrics.observe_push(outcome, first_late)
        self.journal.pushed(
            delivery.project,
            delivery.queue,
            message.id,
            delivery.subscription.id,
            delivery.attempts + 1,
            outcome,
            message.due_ms,
            error,
            now_ms,
        )
        if dead_letter_queue:
            self.metrics.push_dead_lettered.inc()
            self.journal.dead_lettered(
                delivery.project, delivery.queue, [message.id], dead_letter_queue, now_ms
            )

    def dead_lettered(
        self, project: str, queue: str, ids: Sequence[str], target: str, now_ms: int
    ) -> None:
        self.metrics.count_dead_lettered(project, queue, len(ids))
        self.journal.dead_lettered(project, queue, ids, target, now_ms)

    def scheduled(
        self,
        project: str,
        queue: str,
        schedule: str,
        fires: Sequence[Fire],
        missed: int,
        now_ms: int,
    ) -> None:
        """A schedule fired: the messages it posted to ``queue`` and the slots it skipped.
        Fires ``repeated`` (stored by an earlier attempt) are journaled, as repeats, and not
        counted again; nor are the skipped slots when every fire is a repeat."""
        new = [fire for fire in fires if not fire.repeated]
        if new:
            self.metrics.count_fires(project, queue, schedule, new, missed)
        self.journal.scheduled(project, queue, schedule, fires, now_ms)

    def fire_failed(self, project: str, queue: str, schedule: str) -> None:
        """A fire of ``queue``'s schedule failed (its tick is retried)."""
        self.metrics.count_failed_fire(project, queue, schedule)
