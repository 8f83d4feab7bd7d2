"""Choosing which due pushes a lease takes, written once for the stores that lease in Python
(MongoDB, Swift); Redis makes the same choices inside its push script, in one round trip.

A lease lists a queue's pushes due by its time, oldest first, ``SCAN_EXTRA`` more than it may
take (some will be passed over), and goes through them until it has ``limit``:

- a push whose message or subscription is gone goes, and, when its subscription limits
  concurrency, the oldest push parked for a place is owed again (had the gone push held a
  place, that place is free now);
- a push whose message is due later than the lease (rescheduled or edited since it was owed)
  is owed again at that time: never sent before;
- a push whose subscription limits concurrency takes one of its request places for the lease,
  or is parked until one is given back;
- a push whose subscription limits its rate reserves a slot of it, never before the lease's
  now (a backlog owed in the past is spaced from then, not sent at once), once: a push owed
  again at its slot's time is sent then, unless its message is due later, or later when that
  time passed or another push was sent too close to it (``rate_reservation``); one whose time
  is past the lease's is owed again then, and gives back the place it took.

What is left is taken, each at the time it is sent: its owed time or its message's due time
(later within the lease), whichever is later, or the rate's. The store then leases them; a
place taken for a push the store could not lease (another dispatcher took it first) is given
back (:meth:`Chosen.give_back_unleased`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

from zaqar_delay.dispatch_limits import DispatchLimits
from zaqar_delay.models import LeaseRequest, Subscription
from zaqar_delay.storage.rate_reservation import RateRequest, RateTime


class PushIdentity:
    """A push's id, ``<subscription id>:<message id>``, and its two parts."""

    __slots__ = ()
    push_id: str

    @property
    def subscription_id(self) -> str:
        return self.push_id.split(":", 1)[0]

    @property
    def message_id(self) -> str:
        return self.push_id.split(":", 1)[1]


@dataclasses.dataclass(frozen=True, slots=True)
class DuePush(PushIdentity):
    """A push a lease found due: its id, the time it is owed at, and the slot of its
    subscription's rate it holds when it is owed at that slot's time (None otherwise)."""

    push_id: str
    owed_ms: int
    rate_slot: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Lease:
    """One lease of one queue's pushes: its token, when it ends, and the time it is taken."""

    project: str
    queue: str
    token: str
    end_ms: int
    now_ms: int

    def holder(self, push: DuePush) -> str:
        """Who holds a request place for ``push`` under this lease."""
        return holder_of(push.push_id, self.token)


def holder_of(push_id: str, token: str) -> str:
    """Who holds a request place: the push, under the lease of ``token``. A lease takes the
    place under this name and the settle of the push's attempt gives it back under it."""
    return f"{push_id}@{token}"


class LeaseWrites(Protocol):
    """What a store writes for one lease of one queue while the lease chooses its pushes.
    Each write to a push applies only while the push is still owed as it was found."""

    def drop(self, push: DuePush) -> None:
        """The push goes: its message or subscription is gone."""

    def owe_again(self, push: DuePush, at_ms: int, *, rate_slot: int | None) -> None:
        """Owe the push at ``at_ms`` instead (``rate_slot``: the slot of its rate it holds,
        whose time ``at_ms`` is)."""

    def hold_place(self, push: DuePush, subscription_id: str, concurrency: int) -> bool:
        """Hold one of the subscription's ``concurrency`` request places for the push until
        the lease ends; when none is free, park the push until one is given back: False."""

    def take_rate(self, subscription_id: str, request: RateRequest) -> RateTime | None:
        """The slot of the subscription's rate a push holds (reserved for it if it holds
        none) and its send time (``rate_reservation.take``); None when other dispatchers kept
        changing the rate."""

    def give_back(self, push: DuePush, subscription_id: str) -> None:
        """Free the place the push holds, and owe again the oldest push parked for one."""

    def unpark(self, subscription_id: str) -> None:
        """Owe again the oldest push of the subscription parked for a place."""


@dataclasses.dataclass(slots=True)
class Chosen:
    """The pushes a lease takes, each with the time it is sent at, oldest first; and the
    subscriptions of those that hold a request place (by push id)."""

    pushes: list[tuple[DuePush, int]] = dataclasses.field(default_factory=list)
    places: dict[str, str] = dataclasses.field(default_factory=dict)

    def give_back_unleased(self, leased: Collection[str], writes: LeaseWrites) -> None:
        """Give back the places taken for pushes the store did not lease (``leased``: the
        ids of those it did): another dispatcher leased or parked them first."""
        for push, _ in self.pushes:
            sid = self.places.get(push.push_id)
            if sid is not None and push.push_id not in leased:
                writes.give_back(push, sid)


def choose(
    pushes: Sequence[DuePush],
    subscriptions: Mapping[str, Subscription],
    due_ms: Mapping[str, int],
    writes: LeaseWrites,
    request: LeaseRequest,
) -> Chosen:
    """Up to ``request.limit`` of ``pushes`` (due by ``request.until_ms``, oldest first) to
    lease, the others passed over as the module says. ``subscriptions``: the live
    subscriptions among theirs; ``due_ms``: the due time of each of their messages still
    live."""
    chosen = Chosen()
    until_ms = request.until_ms
    for push in pushes:
        if len(chosen.pushes) == request.limit:
            break
        subscription = subscriptions.get(push.subscription_id)
        due = due_ms.get(push.message_id)
        if subscription is None or due is None:
            writes.drop(push)
            if subscription is not None and DispatchLimits.of(subscription.options).concurrency:
                writes.unpark(subscription.id)
            continue
        if due > until_ms:
            writes.owe_again(push, due, rate_slot=None)
            continue
        # Never sent before its message is due (a later due time within the lease).
        earliest_ms = max(push.owed_ms, due)
        send_ms = _within_limits(push, subscription, writes, (earliest_ms, request), chosen.places)
        if send_ms is not None:
            chosen.pushes.append((push, send_ms))
    return chosen


def _within_limits(
    push: DuePush,
    subscription: Subscription,
    writes: LeaseWrites,
    times: tuple[int, LeaseRequest],
    places: dict[str, str],
) -> int | None:
    """When the push may be sent within its subscription's limits, its place taken (and
    recorded in ``places``); None when it is held back (parked, or owed again at the time the
    rate reserved). ``times``: the earliest it may be sent, and the lease."""
    earliest_ms, request = times
    rules = DispatchLimits.of(subscription.options)
    sid = subscription.id
    if rules.concurrency:
        if not writes.hold_place(push, sid, rules.concurrency):
            return None
        places[push.push_id] = sid
    if not rules.interval_ms:
        return earliest_ms
    # The slot reserved for it is kept unless its message is due later.
    slot_ms = push.rate_slot if push.owed_ms == earliest_ms else None
    timed = writes.take_rate(
        sid,
        RateRequest(slot_ms, earliest_ms, request.now_ms, request.until_ms, rules.interval_ms),
    )
    if timed is None or timed.send_ms > request.until_ms:
        if timed is not None:
            writes.owe_again(push, timed.send_ms, rate_slot=timed.slot_ms)
        if places.pop(push.push_id, None):
            writes.give_back(push, sid)
        return None
    return timed.send_ms
