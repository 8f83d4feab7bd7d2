"""Settling push attempts (``Deliveries.settle_pushes``), written once for the stores that
settle in Python (MongoDB, Swift); Redis does the same inside its push script.

1. Each attempt's outcome is recorded while its own lease still holds the push: delivered or
   given up ends the push, a retry time owes it again then with one attempt more (a push
   given back unsent: none more). An outcome whose lease ran out and was taken again is
   ignored.
2. Every attempt of a subscription that limits concurrency gives back the request place it
   held (a place is held by the push under its lease, so one already taken again stays), and
   the oldest push parked for a place is owed again.
3. The messages of the deliveries to consume (ended, ``_delete_after_push``) are deleted once
   no push of theirs is owed any more; the ids deleted by this call are returned, for the
   journal and the metrics.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

from zaqar_delay.dispatch_limits import DispatchLimits
from zaqar_delay.models import Delivery, PushOutcome, Settlement


class SettleWrites(Protocol):
    """What a store writes to settle one queue's attempts."""

    def record(self, outcomes: Sequence[PushOutcome], unsent: Collection[str]) -> None:
        """Record each outcome while its own lease still holds the push (step 1); the
        ``unsent`` deliveries count no attempt."""

    def give_back(self, delivery: Delivery) -> None:
        """Free the request place the attempt held, and owe again the oldest push of its
        subscription parked for one."""

    def still_owed(self, message_ids: Collection[str]) -> set[str]:
        """Those of ``message_ids`` a push to a live subscription is still owed for (a
        deleted or expired subscription's is dropped, and keeps no message)."""

    def delete_consumed(self, message_ids: Sequence[str]) -> list[str]:
        """Delete these messages; the ids of those this call deleted."""


def settle(writes: SettleWrites, settlement: Settlement) -> list[str]:
    """Settle the attempts as the module says; returns the ids of the messages deleted."""
    outcomes, consume = settlement.outcomes, set(settlement.consume)
    writes.record(outcomes, settlement.unsent)
    # One after another: each give-back owes again the oldest parked push, and the next one
    # must find that push no longer parked (in parallel they read the same parked pushes).
    for delivery, _ in outcomes:
        if DispatchLimits.of(delivery.subscription.options).concurrency:
            writes.give_back(delivery)
    ended = [d.message.id for d, retry_at in outcomes if retry_at is None and d.id in consume]
    ended = list(dict.fromkeys(ended))
    if not ended:
        return []
    owed = writes.still_owed(ended)
    return writes.delete_consumed([m for m in ended if m not in owed])
