"""Owed pushes on MongoDB: the ``pushes`` collection, one document per (subscription,
message), indexed by the time of its next attempt across every queue, so one query finds what
is due anywhere.

Leases work as claims do: an update whose filter still sees the push due (``n <= now``) takes
it and moves ``n`` to the lease's end, so a concurrent dispatcher's update no longer matches.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from pymongo import DeleteMany, UpdateOne
from pymongo.errors import BulkWriteError

from zaqar_delay.dispatch_limits import DispatchLimits
from zaqar_delay.models import Delivery
from zaqar_delay.storage.bounds import SCAN_EXTRA
from zaqar_delay.storage.deliveries import PARKED
from zaqar_delay.storage.mongodb.common import Doc, message_of
from zaqar_delay.storage.mongodb.errors import duplicate_positions, translate_class_errors
from zaqar_delay.storage.mongodb.push_limits import PushLimitOps
from zaqar_delay.storage.mongodb.subscriptions import subscription_of


@translate_class_errors
class PushOps(PushLimitOps):
    """Owe, find, lease and settle pushes."""

    def _owe_pushes(self, project: str, queue: str, stored: Sequence[Doc], now_ms: int) -> int:
        """Owe each stored message to each live subscription of the queue at its due time
        (a push already owed stays as it is); returns the earliest of those times (0: none
        owed)."""
        if not stored:
            return 0
        subscriptions = self._subscriptions.find(
            {**self._queue_filter(project, queue), "e": {"$gt": now_ms}}, {"_id": 1}
        )
        pushes = [
            {
                "_id": f"{s['_id']}:{m['_id']}",
                "p": project,
                "q": queue,
                "s": s["_id"],
                "m": m["_id"],
                "n": m["d"],
                "a": 0,
            }
            for s in subscriptions
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

    def lease_pushes(
        self,
        project: str,
        queue: str,
        now_ms: int,
        lease_ms: int,
        limit: int,
        until_ms: int | None = None,
    ) -> list[Delivery]:
        until = now_ms if until_ms is None else until_ms
        lease_end = until + lease_ms
        scope = self._queue_filter(project, queue)
        due = {**scope, "n": {"$lte": until}}
        candidates = list(
            self._pushes.find(due, {"_id": 1, "n": 1, "r": 1})
            .sort("n", 1)
            .limit(limit + SCAN_EXTRA)
        )
        if not candidates:
            return []
        token = secrets.token_hex(8)
        subscription_ids = {c["_id"].split(":", 1)[0] for c in candidates}
        live = {"e": {"$gt": now_ms}}
        subscriptions = {
            s["_id"]: subscription_of(s)
            for s in self._subscriptions.find(
                {**scope, **live, "_id": {"$in": list(subscription_ids)}}
            )
        }
        # Messages rescheduled or edited to a later due time since their push was owed.
        due_later = {
            m["_id"]: int(m["d"])
            for m in self._messages.find(
                {
                    **scope,
                    "_id": {"$in": [c["_id"].split(":", 1)[1] for c in candidates]},
                    "d": {"$gt": until},
                },
                {"d": 1},
            )
        }
        owed: dict[str, int] = {}  # push id -> the time it is sent at
        places: dict[str, str] = {}  # push id -> subscription, for the places taken
        for candidate in candidates:
            if len(owed) == limit:
                break
            push_id, owed_ms = candidate["_id"], int(candidate["n"])
            sid, message_id = push_id.split(":", 1)
            if message_id in due_later:
                # Owed again when its message is due: never sent before.
                self._pushes.update_one(
                    {"_id": push_id, "n": owed_ms}, {"$set": {"n": due_later[message_id]}}
                )
                continue
            subscription = subscriptions.get(sid)
            rules = DispatchLimits.of(subscription.options if subscription else None)
            holder = f"{push_id}@{token}"
            if rules.concurrency:
                if not self._take_place(
                    project, queue, sid, rules.concurrency, holder, lease_end, now_ms
                ):
                    self._park(push_id, owed_ms)
                    # A place freed since: its unpark may have run before this park.
                    if self._take_place(
                        project, queue, sid, rules.concurrency, holder, lease_end, now_ms
                    ):
                        self._give_back(sid, holder)
                    continue
                places[push_id] = sid
            send_ms = owed_ms
            if rules.interval_ms and candidate.get("r") != owed_ms:
                reserved = self._take_rate(project, queue, sid, owed_ms, rules.interval_ms)
                if reserved is None or reserved > until:
                    if reserved is not None:
                        # Owed again at the time reserved for it.
                        self._pushes.update_one(
                            {"_id": push_id, "n": owed_ms}, {"$set": {"n": reserved, "r": reserved}}
                        )
                    if places.pop(push_id, None):
                        self._give_back(sid, holder)
                    continue
                send_ms = reserved
            owed[push_id] = send_ms
        if owed:
            self._pushes.update_many(
                {**due, "_id": {"$in": list(owed)}},
                {"$set": {"n": lease_end, "l": token}, "$unset": {"r": ""}},
            )
        leased = list(self._pushes.find({**scope, "l": token}))
        taken = {p["_id"] for p in leased}
        for push_id, sid in places.items():
            if push_id not in taken:  # another dispatcher leased or parked it first
                self._give_back(sid, f"{push_id}@{token}")
        for sid in subscription_ids - set(subscriptions):
            self._drop_parked(sid)
        queue_metadata = self.get_metadata(project, queue) or {}
        message_ids = {p["_id"].split(":", 1)[1] for p in leased}
        messages = {
            m["_id"]: message_of(m, now_ms)
            for m in self._messages.find({**scope, **live, "_id": {"$in": list(message_ids)}})
        }
        deliveries, gone = [], []
        for push in leased:
            subscription_id, message_id = push["_id"].split(":", 1)
            if subscription_id not in subscriptions or message_id not in messages:
                gone.append(push["_id"])
                continue
            deliveries.append(
                Delivery(
                    id=push["_id"],
                    project=project,
                    queue=queue,
                    subscription=subscriptions[subscription_id],
                    message=messages[message_id],
                    attempts=int(push["a"]),
                    lease=token,
                    owed_ms=owed.get(push["_id"], now_ms),
                    queue_metadata=queue_metadata,
                )
            )
        if gone:
            self._pushes.delete_many({"_id": {"$in": gone}, "l": token})
            for push_id in gone:
                if push_id in places:
                    self._give_back(places[push_id], f"{push_id}@{token}")
        return deliveries

    def settle_pushes(
        self,
        project: str,
        queue: str,
        outcomes: Sequence[tuple[Delivery, int | None]],
        now_ms: int,
        consume: Sequence[str] = (),
    ) -> list[str]:
        # Each attempt only while its own lease still holds the push; one bulk write.
        done: dict[str, list[str]] = {}
        writes: list[DeleteMany | UpdateOne] = []
        for delivery, retry_at in outcomes:
            if retry_at is None:
                done.setdefault(delivery.lease, []).append(delivery.id)
            else:
                writes.append(
                    UpdateOne(
                        {"_id": delivery.id, "l": delivery.lease},
                        {"$set": {"n": retry_at, "l": None}, "$inc": {"a": 1}},
                    )
                )
        writes += [DeleteMany({"_id": {"$in": ids}, "l": token}) for token, ids in done.items()]
        if writes:
            self._pushes.bulk_write(writes, ordered=False)
        for delivery, _ in outcomes:
            if DispatchLimits.of(delivery.subscription.options).concurrency:
                sid = delivery.subscription.id
                self._give_back(sid, f"{delivery.id}@{delivery.lease}")
        scope = self._queue_filter(project, queue)
        consumed: list[str] = []
        for delivery in (d for d, retry_at in outcomes if retry_at is None and d.id in consume):
            message_id = delivery.message.id
            if self._pushes.find_one({**scope, "m": message_id}, {"_id": 1}) is not None:
                continue  # another subscription is still owed it
            if self._messages.delete_one({**scope, "_id": message_id}).deleted_count:
                consumed.append(message_id)
        return consumed
