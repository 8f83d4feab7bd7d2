"""Dispatch limits of subscriptions on MongoDB (``zaqar_delay.dispatch_limits``), kept in the
``push_limits`` collection so that every server process shares them:

- ``{_id: "<sid>/rate", s, p, q, t, o, l}``: the subscription's rate, its next free slot
  ``t``, offset ``o`` and last send ``l`` (ms), changed by compare-and-set
  (``storage.rate_reservation``).
- ``{_id: "<sid>/<i>", s, p, q, i, e, h}``: request place ``i`` of the subscription's
  concurrency, held by ``h`` (``"<push id>@<lease token>"``) until ``e``, the lease's end; a
  place whose lease ran out is free again. Places are made the first time they are needed.

A push held back by the rate is owed again at the time reserved for it (``r`` on the push
remembers that time and ``rs`` the slot, so it is not taken twice); one held back by
concurrency is parked: its ``n`` becomes ``PARKED`` + its owed time (never due) until a
request of its subscription ends.
"""

from __future__ import annotations

import dataclasses

from pymongo import UpdateOne
from pymongo.collection import Collection
from pymongo.errors import BulkWriteError, DuplicateKeyError

from zaqar_delay.storage.deliveries import PARKED
from zaqar_delay.storage.mongodb.common import Doc, MongoBase
from zaqar_delay.storage.mongodb.errors import duplicate_positions
from zaqar_delay.storage.push_leasing import DuePush, Lease
from zaqar_delay.storage.rate_reservation import RateState


@dataclasses.dataclass(frozen=True, slots=True)
class RateDocument:
    """A subscription's rate (``rate_reservation.RateCell``): the document
    ``{_id: "<sid>/rate", s, p, q, t, o, l}``, whose version is ``t``, ``o`` and ``l``
    themselves (none of them ever goes back; ``o`` and ``l`` are absent from a document
    written before rates had them)."""

    collection: Collection[Doc]
    sid: str
    project: str
    queue: str

    def read(self) -> tuple[RateState | None, object]:
        current = self.collection.find_one({"_id": f"{self.sid}/rate"})
        if current is None:
            return None, None
        version = (current["t"], current.get("o"), current.get("l"))
        return RateState(float(current["t"]), int(current.get("o") or 0), current.get("l")), version

    def replace(self, version: object, state: RateState) -> bool:
        key = f"{self.sid}/rate"
        fields = {"t": state.free_ms, "o": state.offset_ms, "l": state.last_ms}
        if version is None:
            try:
                self.collection.insert_one(
                    {"_id": key, "s": self.sid, "p": self.project, "q": self.queue, **fields}
                )
            except DuplicateKeyError:
                return False
            return True
        assert isinstance(version, tuple)
        free, offset, last = version
        taken = self.collection.update_one(
            {"_id": key, "t": free, "o": offset, "l": last}, {"$set": fields}
        )
        return taken.modified_count > 0


class PushLimitOps(MongoBase):
    """Take, give back and reset what subscriptions' dispatch limits allow."""

    def _rate(self, lease: Lease, sid: str) -> RateDocument:
        return RateDocument(self._push_limits, sid, lease.project, lease.queue)

    def _take_place(self, lease: Lease, push: DuePush, sid: str, concurrency: int) -> bool:
        """Hold one of the subscription's ``concurrency`` request places for ``push`` until
        the lease ends."""
        for made in (False, True):
            taken = self._push_limits.find_one_and_update(
                {"s": sid, "i": {"$lt": concurrency}, "e": {"$lte": lease.now_ms}},
                {"$set": {"e": lease.end_ms, "h": lease.holder(push)}},
            )
            if taken is not None:
                return True
            if not made:
                self._make_places(lease.project, lease.queue, sid, concurrency)
        return False

    def _make_places(self, project: str, queue: str, sid: str, concurrency: int) -> None:
        existing = {d["i"] for d in self._push_limits.find({"s": sid, "i": {"$exists": True}})}
        missing = [
            {"_id": f"{sid}/{i}", "s": sid, "p": project, "q": queue, "i": i, "e": 0, "h": ""}
            for i in range(concurrency)
            if i not in existing
        ]
        if missing:
            try:
                self._push_limits.insert_many(missing, ordered=False)
            except BulkWriteError as exc:
                # Places another dispatcher made first are fine; nothing else is.
                if duplicate_positions(exc) is None:
                    raise

    def _give_back_place(self, sid: str, holder: str) -> bool:
        """Free the place ``holder`` holds; False if it holds none (its lease ran out and the
        place was taken again)."""
        freed = self._push_limits.update_one({"s": sid, "h": holder}, {"$set": {"e": 0, "h": ""}})
        return freed.modified_count > 0

    def _give_back(self, sid: str, holder: str) -> None:
        """Free ``holder``'s place and owe again the oldest push parked for want of one."""
        if self._give_back_place(sid, holder):
            self._unpark(sid, 1)

    def _park(self, push_id: str, owed_ms: int) -> None:
        # Owed again: the lease that held it, if any, is over (see _LeaseWrites.owe_again).
        self._pushes.update_one(
            {"_id": push_id, "n": owed_ms}, {"$set": {"n": PARKED + owed_ms, "l": None}}
        )

    def _unpark(self, sid: str, count: int | None) -> None:
        """Owe again, as before, up to ``count`` (None: all) parked pushes of ``sid``, oldest
        first, in one bulk write."""
        parked = self._pushes.find({"s": sid, "n": {"$gte": PARKED}}, {"n": 1}).sort("n", 1)
        if count is not None:
            parked = parked.limit(count)
        writes = [
            UpdateOne({"_id": push["_id"], "n": push["n"]}, {"$set": {"n": push["n"] - PARKED}})
            for push in parked
        ]
        if writes:
            self._pushes.bulk_write(writes, ordered=False)

    def _unpark_all(self, sid: str) -> None:
        """Owe again every parked push of ``sid`` and forget its limit state (its limits
        changed)."""
        self._push_limits.delete_many({"s": sid})
        self._unpark(sid, None)

    def _drop_parked(self, sid: str) -> None:
        """Drop the parked pushes and the limit state of ``sid`` (it is gone)."""
        self._pushes.delete_many({"s": sid, "n": {"$gte": PARKED}})
        self._push_limits.delete_many({"s": sid})

    def _drop_queue_limits(self, scope: Doc) -> None:
        """Drop every parked push and limit state of a queue's subscriptions."""
        self._pushes.delete_many({**scope, "n": {"$gte": PARKED}})
        self._push_limits.delete_many(scope)
