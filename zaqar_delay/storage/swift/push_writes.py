"""What a Swift push lease and a settle write while the shared protocols run
(``push_leasing.LeaseWrites``, ``push_settlement.SettleWrites``), on the pushes' index
entries as :mod:`zaqar_delay.storage.swift.pushes` keeps them."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from zaqar_delay.models import Delivery, PushOutcome
from zaqar_delay.storage import rate_reservation
from zaqar_delay.storage.push_leasing import DuePush, Lease, holder_of
from zaqar_delay.storage.rate_reservation import RateRequest, RateTime
from zaqar_delay.storage.swift.owed import Owed

if TYPE_CHECKING:
    from zaqar_delay.storage.swift.pushes import PushOps


@dataclasses.dataclass(frozen=True, slots=True)
class LeaseWrites:
    """What one lease of a queue writes while it chooses (``push_leasing.LeaseWrites``), on
    the pushes as their entries named them when listed (``owed``)."""

    ops: PushOps
    lease: Lease
    owed: dict[str, Owed]
    # The request places this lease found held or took, by subscription (_take_place).
    places: dict[str, dict[int, int]] = dataclasses.field(default_factory=dict)
    # The number of the place each push took, by push id.
    taken: dict[str, int] = dataclasses.field(default_factory=dict)
    # Pushes this lease owed again by their parked entries (a place it gave back) after it
    # listed them: their listed entries are gone, and the next lease takes them where they
    # are now. Written from one, they would be owed twice.
    moved: set[str] = dataclasses.field(default_factory=set)

    def drop(self, push: DuePush) -> None:
        if push.push_id not in self.moved:
            self.ops._drop_owed(self.lease.project, self.lease.queue, self.owed[push.push_id])

    def owe_again(self, push: DuePush, at_ms: int, *, rate_slot: int | None) -> None:
        if push.push_id in self.moved:
            return
        owed = self.owed[push.push_id]
        again = dataclasses.replace(owed, at_ms=at_ms)
        if rate_slot is not None:
            again = dataclasses.replace(again, reserved=str(at_ms), slot=str(rate_slot))
        self.ops._move_owed(self.lease.project, self.lease.queue, owed, again)

    def hold_place(self, push: DuePush, subscription_id: str, concurrency: int) -> bool:
        """A place, or the push parked until the time the first place frees at the latest
        (a give-back owes it again sooner)."""
        if push.push_id in self.moved:
            return False
        owed = self.owed[push.push_id]
        known = self.places.setdefault(subscription_id, {})
        place, frees_ms = self.ops._take_place(
            self.lease, push, subscription_id, concurrency, known
        )
        if place is not None:
            self.taken[push.push_id] = place
            return True
        parked = dataclasses.replace(
            owed, at_ms=frees_ms, parked_from=owed.parked_from or str(owed.at_ms)
        )
        self.ops._park(self.lease.project, self.lease.queue, owed, parked)
        return False

    def take_rate(self, subscription_id: str, request: RateRequest) -> RateTime | None:
        return rate_reservation.take(self.ops._rate(self.lease, subscription_id), request)

    def give_back(self, push: DuePush, subscription_id: str) -> None:
        place = self.taken.pop(push.push_id, None)
        holder = self.lease.holder(push)
        self.moved.update(
            self.ops._give_back(
                self.lease.project, self.lease.queue, subscription_id, holder, place
            )
        )

    def unpark(self, subscription_id: str) -> None:
        self.moved.update(
            self.ops._unpark(self.lease.project, self.lease.queue, subscription_id, 1)
        )


@dataclasses.dataclass(frozen=True, slots=True)
class SettleWrites:
    """What settling one queue's attempts writes (``push_settlement.SettleWrites``)."""

    ops: PushOps
    project: str
    queue: str
    now_ms: int

    def record(self, outcomes: Sequence[PushOutcome], unsent: Collection[str]) -> None:
        self.ops._swift.each(
            lambda item: self.ops._record_outcome(
                self.project, self.queue, *item, attempted=item[0].id not in unsent
            ),
            outcomes,
        )

    def give_back(self, delivery: Delivery) -> None:
        token, _, _, place = lease_parts(delivery.lease)
        holder = holder_of(delivery.id, token)
        self.ops._give_back(self.project, self.queue, delivery.subscription.id, holder, place)

    def still_owed(self, message_ids: Collection[str]) -> set[str]:
        # Owed to a subscription still there: a deleted or expired one's push is dropped.
        live = set(self.ops._live_subscription_ids(self.project, self.queue, self.now_ms))
        owed = {
            owed.message_id
            for owed in self.ops._queue_owed(self.project, self.queue)
            if owed.subscription_id in live
        }
        return owed & set(message_ids)

    def delete_consumed(self, message_ids: Sequence[str]) -> list[str]:
        """The messages still stored, removed; a message another call removed first is not
        read, so not counted twice."""
        ops = self.ops
        docs = ops._swift.each(
            lambda m: ops._read_message(self.project, self.queue, m, known=True), message_ids
        )
        stored = [(m, d) for m, d in zip(message_ids, docs, strict=True) if d is not None]
        ops._swift.each(
            lambda item: ops._remove_message(self.project, self.queue, item[0], item[1], None),
            stored,
        )
        return [message_id for message_id, _ in stored]


def lease_of(lease: Lease, number: int, place: int | None) -> str:
    """A delivery's lease: the lease's token, the push's lease number, when the lease ends,
    and the request place the push holds ("" for none)."""
    return f"{lease.token}/{number}/{lease.end_ms}/{'' if place is None else place}"


def lease_parts(lease: str) -> tuple[str, int, int, int | None]:
    """What :func:`lease_of` wrote: token, lease number, end, place (None: none, or a lease
    of an earlier release, which named none)."""
    token, number, end, *rest = lease.split("/")
    place = rest[0] if rest else ""
    return token, int(number), int(end), int(place) if place else None
