"""Owed pushes on Swift, in the pushes container. A push ``<sid>:<message id>`` owed at ``n``
has two empty index entries, its fields (attempts ``a``, leases so far ``k``, rate reservation
``r``) in their content type:

- ``g/<n>/<p>/<q>/<push id>``: every queue's pushes by time, so one listing finds the queues
  with a push due;
- ``q/<p>/<q>/<n>/<push id>``: the queue's, which a lease lists.

Changing ``n`` writes the new entries, then deletes the old. A lease takes the push's next
lease number, ``l/<p>/<q>/<push id>/<k + 1>``, which one dispatcher only can create
(``SwiftClient.create_settled``; it records the lease's end ``e`` and when it was taken
``at``), and moves the push to the lease's end; a settle counts only while no later lease was
taken. A dispatcher that finds the next lease taken leaves the push to its taker, and moves
it for the taker once the lease taker grace (``SwiftTimes``) has passed (the taker may have
died before it moved it), so a push is never dropped for a lease that nobody holds.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import urllib.parse
from collections.abc import Sequence

from zaqar_delay.models import Delivery, LeaseRequest, Settlement
from zaqar_delay.storage import push_leasing, push_settlement
from zaqar_delay.storage.bounds import SCAN_EXTRA
from zaqar_delay.storage.push_leasing import DuePush, Lease
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.common import Doc, delete_at, message_of
from zaqar_delay.storage.swift.owed import Owed, owed_for, owed_of
from zaqar_delay.storage.swift.push_limits import PushLimitOps
from zaqar_delay.storage.swift.push_writes import LeaseWrites, SettleWrites, lease_of, lease_parts
from zaqar_delay.storage.swift.slot_ops import SlotOps
from zaqar_delay.storage.swift.slots import Slot
from zaqar_delay.storage.swift.subscriptions import SubscriptionOps, subscription_of


class PushOps(SubscriptionOps, PushLimitOps, SlotOps):
    """Owe, find, lease and settle pushes."""

    # -- entries -------------------------------------------------------------------------------

    def _push_entries(self, project: str, queue: str, owed: Owed) -> tuple[str, str]:
        prefix = names.queue_prefix(project, queue)
        at = names.push_time_part(owed.at_ms)
        return f"g/{at}/{prefix}{owed.push_id}", f"q/{prefix}{at}/{owed.push_id}"

    def _put_owed(self, project: str, queue: str, owed: Owed) -> None:
        container = self._container(names.PUSHES)
        for name in self._push_entries(project, queue, owed):
            self._swift.put(container, name, b"", owed.content_type())

    def _drop_owed(self, project: str, queue: str, owed: Owed) -> None:
        container = self._container(names.PUSHES)
        for name in self._push_entries(project, queue, owed):
            self._swift.delete(container, name)

    def _move_owed(self, project: str, queue: str, old: Owed, new: Owed) -> None:
        """Owe the push at ``new`` instead of ``old``: the new entries first, so a failure
        part-way leaves it owed twice (a race a lease settles), never not at all."""
        self._put_owed(project, queue, new)
        if self._push_entries(project, queue, new) != self._push_entries(project, queue, old):
            self._drop_owed(project, queue, old)

    def _queue_owed(
        self, project: str, queue: str, from_ms: int = 0, until_ms: int | None = None
    ) -> list[Owed]:
        prefix = f"q/{names.queue_prefix(project, queue)}"
        end = prefix + names.push_time_part(until_ms + 1) if until_ms is not None else ""
        marker = prefix + names.push_time_part(from_ms) if from_ms else ""
        return [
            owed_of(entry["name"], entry["content_type"])
            for entry in self._swift.walk(
                self._container(names.PUSHES), prefix, marker=marker, end_marker=end
            )
        ]

    # -- owing ---------------------------------------------------------------------------------

    def _live_subscription_ids(self, project: str, queue: str, now_ms: int) -> list[str]:
        prefix = f"{names.queue_prefix(project, queue)}s/"
        return [
            entry["name"][len(prefix) :]
            for entry in self._swift.walk(self._container(names.SUBSCRIPTIONS), prefix)
            if int(names.fields_of(entry["content_type"])["e"]) > now_ms
        ]

    def _owe_pushes(
        self,
        project: str,
        queue: str,
        stored: Sequence[tuple[str, Doc]],
        now_ms: int,
        subscriptions: Sequence[str] | None = None,
    ) -> int:
        """Owe each stored message to each live subscription of the queue (``subscriptions``,
        read now when not given) at its due time; returns the earliest of those times (0:
        none owed)."""
        if not stored:
            return 0
        if subscriptions is None:
            subscriptions = self._live_subscription_ids(project, queue, now_ms)
        owed = owed_for(stored, subscriptions)
        self._swift.each(lambda o: self._put_owed(project, queue, o), owed)
        return min((int(doc["d"]) for _, doc in stored), default=0) if owed else 0

    def _unowe_pushes(
        self,
        project: str,
        queue: str,
        stored: Sequence[tuple[str, Doc]],
        subscriptions: Sequence[str],
    ) -> None:
        """Withdraw what :meth:`_owe_pushes` owed for ``stored`` to ``subscriptions`` (their
        post is refused)."""
        owed = owed_for(stored, subscriptions)
        self._swift.each(lambda o: self._drop_owed(project, queue, o), owed)

    # -- finding -------------------------------------------------------------------------------

    def due_push_queues(self, now_ms: int, limit: int) -> list[tuple[str, str]]:
        queues: dict[tuple[str, str], None] = {}
        for entry in self._swift.walk(
            self._container(names.PUSHES), "g/", end_marker="g/" + names.push_time_part(now_ms + 1)
        ):
            project, queue = entry["name"].split("/")[2:4]
            queues.setdefault((urllib.parse.unquote(project), urllib.parse.unquote(queue)), None)
            if len(queues) == limit:
                break
        return list(queues)

    def next_push_ms(self) -> int | None:
        first = self._swift.listing(self._container(names.PUSHES), "g/", limit=1)
        if not first:
            return None
        return int(first[0]["name"].split("/")[1])

    # -- leasing -------------------------------------------------------------------------------

    def _lease_name(self, project: str, queue: str, push_id: str, lease: int) -> str:
        return f"l/{names.queue_prefix(project, queue)}{push_id}/{names.number_part(lease)}"

    def lease_pushes(self, project: str, queue: str, request: LeaseRequest) -> list[Delivery]:
        found = self._queue_owed(project, queue, until_ms=request.until_ms)[
            : request.limit + SCAN_EXTRA
        ]
        if not found:
            return []
        owed = {o.push_id: o for o in found}
        sids = list(dict.fromkeys(o.subscription_id for o in found))
        mids = list(dict.fromkeys(o.message_id for o in found))
        subscriptions = {
            sid: subscription_of(sid, queue, doc)
            for sid, doc in zip(
                sids,
                self._swift.each(lambda s: self._read_subscription(project, queue, s), sids),
                strict=True,
            )
            if doc is not None and int(doc["e"]) > request.now_ms
        }
        messages = {
            mid: doc
            for mid, doc in zip(
                mids,
                self._swift.each(lambda m: self._read_message(project, queue, m, known=True), mids),
                strict=True,
            )
            if doc is not None and int(doc["e"]) > request.now_ms
        }
        lease = Lease(project, queue, secrets.token_hex(8), request.end_ms, request.now_ms)
        writes = LeaseWrites(self, lease, owed)
        chosen = push_leasing.choose(
            [DuePush(o.push_id, o.at_ms, o.rate_slot()) for o in found],
            subscriptions,
            {mid: int(doc["d"]) for mid, doc in messages.items()},
            writes,
            request,
        )

        def take(item: tuple[DuePush, int]) -> Delivery | None:
            push, send_ms = item
            if push.push_id in writes.moved:
                return None  # unparked by this lease since it was listed: owed anew
            leasing = owed[push.push_id]
            lease_number = leasing.leases + 1
            name = self._lease_name(project, queue, push.push_id, lease_number)
            held = json.dumps(
                {
                    "t": lease.token,
                    "k": secrets.token_hex(8),
                    "e": lease.end_ms,
                    "at": request.now_ms,
                }
            ).encode()
            expires_ms = int(messages[push.message_id]["e"])
            if not self._swift.create_settled(
                self._container(names.PUSHES), name, held, names.CONTENT_TYPE, delete_at(expires_ms)
            ):
                self._leased_elsewhere(project, queue, leasing, lease.end_ms, request.now_ms)
                return None
            leased = Owed(push.push_id, lease.end_ms, leasing.attempts, lease_number)
            self._move_owed(project, queue, leasing, leased)
            return Delivery(
                id=push.push_id,
                project=project,
                queue=queue,
                subscription=subscriptions[push.subscription_id],
                message=message_of(
                    push.message_id, messages[push.message_id], Slot(), request.now_ms
                ),
                attempts=leasing.attempts,
                lease=lease_of(lease, lease_number, writes.taken.get(push.push_id)),
                owed_ms=send_ms,
                queue_metadata=self.get_metadata(project, queue) or {},
            )

        deliveries = [d for d in self._swift.each(take, chosen.pushes) if d is not None]
        chosen.give_back_unleased({d.id for d in deliveries}, writes)
        return deliveries

    def _leased_elsewhere(
        self, project: str, queue: str, owed: Owed, lease_end: int, now_ms: int
    ) -> None:
        """Lease ``owed.leases + 1`` of the push was taken by another dispatcher, which then
        moves the push to its lease's end. Within the lease taker grace (``SwiftTimes``) of the
        taking, the push is left to it. After that, if this entry is still there (its taker
        died before it moved the push, or the delete of this entry failed), the move is made
        for it: to the same entries, so a move made by both is one. The push stays owed and
        is sent when that lease ends; a push that was sent and whose old entry a failure left
        is sent again (at least once). A lease of an earlier release, which recorded neither time,
        ends with this one's (``lease_end``)."""
        container = self._container(names.PUSHES)
        found = self._swift.get(
            container, self._lease_name(project, queue, owed.push_id, owed.leases + 1), newest=True
        )
        if found is None:
            return  # gone with its expired message: so goes the push
        lease = json.loads(found[1])
        if now_ms - int(lease.get("at", 0)) < self._times.lease_taker_grace_ms:
            return
        if not self._swift.exists(container, self._push_entries(project, queue, owed)[1]):
            return  # moved already: the listing had not caught up
        taken = Owed(owed.push_id, int(lease.get("e", lease_end)), owed.attempts, owed.leases + 1)
        self._move_owed(project, queue, owed, taken)

    # -- settling ------------------------------------------------------------------------------

    def settle_pushes(
        self, project: str, queue: str, settlement: Settlement, now_ms: int
    ) -> list[str]:
        return push_settlement.settle(SettleWrites(self, project, queue, now_ms), settlement)

    def _record_outcome(
        self, project: str, queue: str, delivery: Delivery, retry_at: int | None, attempted: bool
    ) -> None:
        """One attempt's outcome, only while no later lease took the push (this one ran
        out first); a push given back unsent (not ``attempted``) counts no attempt."""
        _, lease_number, lease_end, _ = lease_parts(delivery.lease)
        if self._swift.exists(
            self._container(names.PUSHES),
            self._lease_name(project, queue, delivery.id, lease_number + 1),
        ):
            return
        leased = Owed(delivery.id, int(lease_end), delivery.attempts, lease_number)
        if retry_at is None:
            # Its lease numbers stay taken (Swift removes them once the message expires): an
            # entry a race left behind can never be leased again.
            self._drop_owed(project, queue, leased)
        else:
            again = Owed(delivery.id, retry_at, delivery.attempts + attempted, lease_number)
            self._move_owed(project, queue, leased, again)

    # -- limits and their parked pushes ---------------------------------------------------------

    def _give_back(
        self, project: str, queue: str, sid: str, holder: str, place: int | None = None
    ) -> list[str]:
        """Free ``holder``'s place (``place``: its number, when known) and owe again the
        oldest push parked for want of one; returns the ids of the pushes it owed again."""
        if self._give_back_place(project, queue, sid, holder, place):
            return self._unpark(project, queue, sid, 1)
        return []

    def _parked_name(self, project: str, queue: str, owed: Owed) -> str:
        """The parked push's entry in its subscription's index of parked pushes, in the order
        they are owed again: ``k/<p>/<q>/<sid>/<parked from>/<push id>``."""
        prefix = self._parked_prefix(project, queue, owed.subscription_id)
        return f"{prefix}{names.push_time_part(int(owed.parked_from))}/{owed.push_id}"

    def _parked_prefix(self, project: str, queue: str, sid: str) -> str:
        return f"k/{names.queue_prefix(project, queue)}{sid}/"

    def _park(self, project: str, queue: str, owed: Owed, parked: Owed) -> None:
        """Owe the push ``owed`` as ``parked`` (at the time a place frees at the latest), and
        index it among its subscription's parked pushes. A failure before the index entry is
        written leaves the push owed at that time, unparked by no give-back: late by one
        lease at most."""
        self._move_owed(project, queue, owed, parked)
        self._swift.put(
            self._container(names.PUSHES),
            self._parked_name(project, queue, parked),
            b"",
            names.content_type(n=parked.at_ms),
        )

    def _parked(self, project: str, queue: str, sid: str, count: int | None) -> list[Owed]:
        """Up to ``count`` (None: all) pushes of ``sid`` parked for want of a place, oldest
        first, from its index of parked pushes (not the queue's whole list of owed pushes).
        An index entry whose push is no longer parked there (leased when its time came) goes."""
        found: list[Owed] = []
        container = self._container(names.PUSHES)
        for entry in self._swift.walk(container, self._parked_prefix(project, queue, sid)):
            push_id = entry["name"].rsplit("/", 1)[1]
            at_ms = int(names.fields_of(entry["content_type"])["n"])
            # The push's own entry tells how it is owed now (and whether it still is so).
            queued = self._push_entries(project, queue, Owed(push_id, at_ms))[1]
            headers = self._swift.head(container, queued)
            if headers is not None and "content-type" in headers:
                owed = owed_of(queued, headers["content-type"])
                if owed.parked_from:
                    found.append(owed)
                    if count is not None and len(found) == count:
                        break
                    continue
            self._swift.delete(container, entry["name"])
        return found

    def _unpark(self, project: str, queue: str, sid: str, count: int | None) -> list[str]:
        """Owe again at their own time up to ``count`` (None: all) parked pushes of ``sid``,
        oldest first; returns their ids."""

        def unpark(owed: Owed) -> None:
            again = dataclasses.replace(owed, at_ms=int(owed.parked_from), parked_from="")
            self._move_owed(project, queue, owed, again)
            self._swift.delete(
                self._container(names.PUSHES), self._parked_name(project, queue, owed)
            )

        parked = self._parked(project, queue, sid, count)
        self._swift.each(unpark, parked)
        return [owed.push_id for owed in parked]

    def _limits_changed(self, project: str, queue: str, subscription_id: str) -> None:
        """Forget the state of the subscription's old limits; owe again what they parked."""
        self._forget_limit_state(project, queue, subscription_id)
        self._unpark(project, queue, subscription_id, None)

    def _subscription_gone(self, project: str, queue: str, subscription_id: str) -> None:
        self._forget_limit_state(project, queue, subscription_id)
        container = self._container(names.PUSHES)

        def drop(owed: Owed) -> None:
            self._drop_owed(project, queue, owed)
            self._swift.delete(container, self._parked_name(project, queue, owed))

        self._swift.each(drop, self._parked(project, queue, subscription_id, None))

    def _subscriptions_purged(self, project: str, queue: str) -> None:
        """Every push of the queue, and its leases and limit state."""
        self._swift.each(
            lambda o: self._drop_owed(project, queue, o), self._queue_owed(project, queue)
        )
        prefix = names.queue_prefix(project, queue)
        self._swift.delete_all(
            self._container(names.PUSHES), *(f"{kind}/{prefix}" for kind in ("l", "r", "p", "k"))
        )
