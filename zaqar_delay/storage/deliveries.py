"""The storage contract of push delivery: which messages are owed to which subscription, and
when each is next attempted.

A message posted to a queue is owed to each live subscription of the queue, due at the
message's due time. Dispatchers (in any server process) find the queues with due pushes in one
store call, lease a batch for one attempt, and record each outcome; a lease that is never
settled (the dispatcher died) ends by itself and its pushes are due again. Pushes whose
message or subscription is gone are dropped when leased. The contract suite's
``TestPushes`` is the executable form.
"""

from __future__ import annotations

import abc

from zaqar_delay.models import Delivery, LeaseRequest, Settlement

# A parked push (its subscription at its most requests in flight) is owed at PARKED + the time
# it was owed: never due until a request of its subscription ends and unparks it. Both drivers
# and the Redis scripts use this one value.
PARKED = 2**51


class DeliveryStore(abc.ABC):
    """The owed pushes of every queue of a store."""

    @abc.abstractmethod
    def due_push_queues(self, now_ms: int, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` (project, queue) pairs with a push due at ``now_ms``, whatever the
        number of queues: one store call."""

    @abc.abstractmethod
    def next_push_ms(self) -> int | None:
        """The earliest time any push is owed (a due time or a lease's end); None for none.
        It may be earlier than that, never later: after a push ends, a store may wake a
        dispatcher once for nothing (when its lease would have ended)."""

    @abc.abstractmethod
    def lease_pushes(self, project: str, queue: str, request: LeaseRequest) -> list[Delivery]:
        """Lease up to ``request.limit`` pushes of the queue owed by ``request.until_ms``,
        oldest first, until ``request.end_ms``: no other lease takes them meanwhile. A push
        leased ahead is sent at its ``owed_ms``, never before: the time it is owed or its
        message is due, whichever is later (or the later time its rate limit gives it)."""

    @abc.abstractmethod
    def settle_pushes(
        self, project: str, queue: str, settlement: Settlement, now_ms: int
    ) -> list[str]:
        """Record attempts made under their lease: ``None`` ends a push (delivered or given
        up), a time makes it due again then with one attempt more (none more for the
        ``unsent`` deliveries, given back unattempted). An outcome whose lease
        ran out is ignored once the push was leased again, or owed again at another time (a
        message due later or brought forward, a dispatch limit holding it back): only the
        lease that holds a push, or held it last, settles it. The messages of the
        ``consume`` deliveries (ended, delivered) are deleted once no push of theirs is owed
        any more; returns the ids of the messages this call deleted (for the journal and the
        metrics)."""
