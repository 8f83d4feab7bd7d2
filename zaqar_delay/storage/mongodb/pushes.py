"""Owed pushes on MongoDB: the ``pushes`` collection, one document per (subscription,
message), indexed by the time of its next attempt across every queue, so one query finds what
is due anywhere.

Leases work as claims do: an update whose filter still sees the push due (``n <= now``) takes
it and moves ``n`` to the lease's end, so a concurrent dispatcher's update no longer matches.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Collection, Sequence

from pymongo import DeleteMany, UpdateOne
from pymongo.errors import BulkWriteError

from zaqar_delay.models import Delivery, LeaseRequest, PushOutcome, Settlement
from zaqar_delay.storage import push_leasing, push_settlement, rate_reservation
from zaqar_delay.storage.bounds import SCAN_EXTRA
from zaqar_delay.storage.deliveries import PARKED
from zaqar_delay.storage.mongodb.common import Doc, message_of
from zaqar_delay.storage.mongodb.errors import duplicate_positions, translate_class_errors
from zaqar_delay.storage.mongodb.push_limits import PushLimitOps
from zaqar_delay.storage.mongodb.subscriptions import subscription_of
from zaqar_delay.storage.push_leasing import DuePush, Lease, holder_of
from zaqar_delay.storage.rate_reservation import RateRequest, RateTime

# A push owed at another time than its rate reserved for it forgets the reservation: its
# time ``r`` and its slot ``rs``.
UNRESERVED = {"r": "", "rs": ""}


def rate_slot_of(push: Doc) -> int | None:
    """The slot of its rate a push holds, when it is owed at that slot's time: ``rs``, or
    ``r`` itself where a reservation made before rates had an offset left no ``rs``."""
    if push.get("r") != push["n"]:
        return None
    slot = push.get("rs")
    return int(push["r"] if slot is None else slot)


@translate_class_errors
class PushOps(PushLimitOps):
    """Owe, find, lease and settle pushes."""

    def _owe_pushes(self, project: str, queue: str, stored: Sequence[Doc], now_ms: int) -> int:
        """Owe each stored message to each live subscription of the queue at its due time
        (a push already owed stays as it is); returns the earliest of those times (0: none
        owed)."""
        if not stored:
            return 0
        subscriptions = self._live_subscription_ids(self._queue_filter(project, queue), now_ms)
        pushes = [
            {
                "_id": f"{sid}:{m['_id']}",
                "p": project,
                "q": queue,
                "s": sid,
                "m": m["_id"],
                "n": m["d"],
                "a": 0,
            }
            for sid in subscriptions
            for m in stored
        ]
        if not pushes:
            return 0
        try:
            self._pushes.insert_many(pushes, ordered=False)
        except BulkWriteError as exc:
            if duplicate_positions(exc) is None:
                raise
        return min(int(m["d"]) for m in stored)

    def _live_subscription_ids(self, scope: Doc, now_ms: int) -> list[str]:
        """The ids of the subscriptions of the queue ``scope`` names that have not expired."""
        live = self._subscriptions.find({**scope, "e": {"$gt": now_ms}}, {"_id": 1})
        return [str(subscription["_id"]) for subscription in live]

    def _bring_pushes_forward(
        self, project: str, queue: str, message_id: str, due: tuple[int, int], now_ms: int
    ) -> int:
        """The message's due time moved from ``due[1]`` to the earlier ``due[0]``: its pushes
        owed in between (owed with the message) that no live lease holds are owed at the new
        time (``Driver.edit_message``); returns it when any were, else 0."""
        new_ms, old_ms = due
        moved = self._pushes.update_many(
            {
                **self._queue_filter(project, queue),
                "m": message_id,
                "n": {"$gt": new_ms, "$lte": old_ms},
                # A leased push is owed at its lease's end, and held until then.
                "$or": [{"l": None}, {"n": {"$lte": now_ms}}],
            },
            # Owed again (see _LeaseWrites.owe_again).
            {"$set": {"n": new_ms, "l": None}, "$unset": UNRESERVED},
        )
        return new_ms if moved.modified_count else 0

    def due_push_queues(self, now_ms: int, limit: int) -> list[tuple[str, str]]:
        found = self._pushes.find({"n": {"$lte": now_ms}}, {"p": 1, "q": 1}).sort("n", 1)
        queues: dict[tuple[str, str], None] = {}
        for doc in found.limit(limit * 16):
            queues.setdefault((doc["p"], doc["q"]), None)
            if len(queues) == limit:
                break
        return list(queues)

    def next_push_ms(self) -> int | None:
        first = self._pushes.find_one({}, {"n": 1}, sort=[("n", 1)])
        return None if first is None or first["n"] >= PARKED else int(first["n"])

    def lease_pushes(self, project: str, queue: str, request: LeaseRequest) -> list[Delivery]:
        scope = self._queue_filter(project, queue)
        due = {**scope, "n": {"$lte": request.until_ms}}
        found = (
            self._pushes.find(due, {"n": 1, "r": 1, "rs": 1})
            .sort("n", 1)
            .limit(request.limit + SCAN_EXTRA)
        )
        pushes = [DuePush(p["_id"], int(p["n"]), rate_slot_of(p)) for p in found]
        if not pushes:
            return []
        live = {"e": {"$gt": request.now_ms}}
        sids = list({p.subscription_id for p in pushes})
        subscriptions = {
            s["_id"]: subscription_of(s)
            for s in self._subscriptions.find({**scope, **live, "_id": {"$in": sids}})
        }
        messages = {
            m["_id"]: m
            for m in self._messages.find(
                {**scope, **live, "_id": {"$in": list({p.message_id for p in pushes})}}
            )
        }
        lease = Lease(project, queue, secrets.token_hex(8), request.end_ms, request.now_ms)
        writes = _LeaseWrites(self, lease)
        chosen = push_leasing.choose(
            pushes,
            subscriptions,
            {mid: int(m["d"]) for mid, m in messages.items()},
            writes,
            request,
        )
        send_ms = {push.push_id: at for push, at in chosen.pushes}
        if send_ms:
            self._pushes.update_many(
                {**due, "_id": {"$in": list(send_ms)}},
                {"$set": {"n": lease.end_ms, "l": lease.token}, "$unset": UNRESERVED},
            )
        leased = list(self._pushes.find({**scope, "l": lease.token}))
        chosen.give_back_unleased({p["_id"] for p in leased}, writes)
        for sid in set(sids) - set(subscriptions):
            self._drop_parked(sid)
        queue_metadata = self.get_metadata(project, queue) or {}
        return [
            Delivery(
                id=push["_id"],
                project=project,
                queue=queue,
                subscription=subscriptions[push["s"]],
                message=message_of(messages[push["m"]], request.now_ms),
                attempts=int(push["a"]),
                lease=lease.token,
                owed_ms=send_ms[push["_id"]],
                queue_metadata=queue_metadata,
            )
            for push in leased
        ]

    def settle_pushes(
        self, project: str, queue: str, settlement: Settlement, now_ms: int
    ) -> list[str]:
        writes = _SettleWrites(self, self._queue_filter(project, queue), now_ms)
        return push_settlement.settle(writes, settlement)


@dataclasses.dataclass(frozen=True, slots=True)
class _LeaseWrites:
    """What one lease of a queue writes while it chooses (``push_leasing.LeaseWrites``):
    each write to a push only while it is still owed at the time it was found."""

    ops: PushOps
    lease: Lease

    def drop(self, push: DuePush) -> None:
        self.ops._pushes.delete_one({"_id": push.push_id, "n": push.owed_ms})

    def owe_again(self, push: DuePush, at_ms: int, *, rate_slot: int | None) -> None:
        # The lease that held the push, if any, is over: an outcome it records later is
        # ignored.
        fields = {"n": at_ms, "l": None}
        update = (
            {"$set": {**fields, "r": at_ms, "rs": rate_slot}}
            if rate_slot is not None
            else {"$set": fields, "$unset": UNRESERVED}
        )
        self.ops._pushes.update_one({"_id": push.push_id, "n": push.owed_ms}, update)

    def hold_place(self, push: DuePush, subscription_id: str, concurrency: int) -> bool:
        def take() -> bool:
            return self.ops._take_place(self.lease, push, subscription_id, concurrency)

        if take():
            return True
        self.ops._park(push.push_id, push.owed_ms)
        # A place freed since: its unpark may have run before this park.
        if take():
            self.ops._give_back(subscription_id, self.lease.holder(push))
        return False

    def take_rate(self, subscription_id: str, request: RateRequest) -> RateTime | None:
        return rate_reservation.take(self.ops._rate(self.lease, subscription_id), request)

    def give_back(self, push: DuePush, subscription_id: str) -> None:
        self.ops._give_back(subscription_id, self.lease.holder(push))

    def unpark(self, subscription_id: str) -> None:
        self.ops._unpark(subscription_id, 1)


@dataclasses.dataclass(frozen=True, slots=True)
class _SettleWrites:
    """What settling one queue's attempts writes (``push_settlement.SettleWrites``)."""

    ops: PushOps
    scope: Doc
    now_ms: int

    def record(self, outcomes: Sequence[PushOutcome], unsent: Collection[str]) -> None:
        """Each attempt only while its own lease still holds the push; one bulk write."""
        done: dict[str, list[str]] = {}
        writes: list[DeleteMany | UpdateOne] = []
        for delivery, retry_at in outcomes:
            if retry_at is None:
                done.setdefault(delivery.lease, []).append(delivery.id)
            else:
                attempted = int(delivery.id not in unsent)
                writes.append(
                    UpdateOne(
                        {"_id": delivery.id, "l": delivery.lease},
                        {"$set": {"n": retry_at, "l": None}, "$inc": {"a": attempted}},
                    )
                )
        writes += [DeleteMany({"_id": {"$in": ids}, "l": token}) for token, ids in done.items()]
        if writes:
            self.ops._pushes.bulk_write(writes, ordered=False)

    def give_back(self, delivery: Delivery) -> None:
        self.ops._give_back(delivery.subscription.id, holder_of(delivery.id, delivery.lease))

    def still_owed(self, message_ids: Collection[str]) -> set[str]:
        # Owed to a subscription still there: a deleted or expired one's push is dropped.
        live = self.ops._live_subscription_ids(self.scope, self.now_ms)
        owed = self.ops._pushes.find(
            {**self.scope, "m": {"$in": list(message_ids)}, "s": {"$in": live}}, {"m": 1}
        )
        return {str(push["m"]) for push in owed}

    def delete_consumed(self, message_ids: Sequence[str]) -> list[str]:
        # One by one: each delete says whether this call deleted the message, which the
        # journal counts once.
        messages = self.ops._messages
        return [
            m for m in message_ids if messages.delete_one({**self.scope, "_id": m}).deleted_count
        ]
