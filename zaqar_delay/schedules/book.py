"""Recurring schedules of queues and topics: written, read, run, and fired once per slot.

Each schedule is two queues of the server's own (``schedules/names.py``). Its next slot is a
*tick*: a message of the definition queue due ``lead_ms`` before the slot, which the push
machinery leases and hands to :meth:`Schedules.fire` at its due time, on whichever server
process, as any push (retried while it fails; a lease that ends with its process is taken
again). A fire posts the slot's message to the target with ``deliver_at`` the slot (so it is
never seen before it) and the dedup id ``schedule:<name>:<slot>`` (so a fire repeated after a
crash, or a replaced plan that keeps the slot, posts it once), records the fire in the state
queue, and posts the next tick (dedup id ``tick:<generation>:<slot>``). A tick of an older
generation (the schedule was written since) or of a paused or deleted schedule fires nothing.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from zaqar_delay import errors, jsondoc, topics, validation
from zaqar_delay.conf import Limits
from zaqar_delay.lifecycle import Lifecycle
from zaqar_delay.models import Fire, Metadata, NewMessage, NewSubscription, Posted
from zaqar_delay.policy import DELETE_AFTER_PUSH, QueuePolicy
from zaqar_delay.retry_policy import KEY as RETRY_POLICY
from zaqar_delay.schedules import document as documents
from zaqar_delay.schedules import names
from zaqar_delay.schedules.document import Schedule
from zaqar_delay.schedules.names import SCHEDULE_SUBSCRIBER
from zaqar_delay.stores import Stores

#: The client id of the messages fires post (a constant, so ``echo=false`` readers see them).
SCHEDULER_CLIENT_ID = uuid.uuid5(uuid.NAMESPACE_URL, "zaqar-delay:schedules").hex
#: How long before its slot a tick is due: the fire posts the message ahead of its slot (due
#: at the slot), so a dispatcher that runs up to this late still makes the slot. The chain of
#: ticks runs this far ahead of the slots, whatever the interval.
LEAD_MS = 2000
# A tick is retried for about 50 minutes of failures (a store outage) before it is dropped;
# writing the schedule again starts it anew.
TICK_RETRIES = {
    "retries_with_no_delay": 3,
    "minimum_delay_retries": 10,
    "minimum_delay": 1,
    "maximum_delay": 30,
    "maximum_delay_retries": 100,
}
SUBSCRIPTION_TTL_S = 100 * 366 * 86400
NAMES_PAGE = 200

Post = Callable[[str, str, bytes, str], Posted]


class Schedules:
    """The schedules of every project's queues and topics, over ``stores``; ``post`` posts
    a fire's message with the target's rules (``Service.post_messages``)."""

    def __init__(self, stores: Stores, limits: Limits, post: Post, lifecycle: Lifecycle) -> None:
        self.stores = stores
        self.limits = limits
        self._post = post
        self.lifecycle = lifecycle

    # -- what clients write ------------------------------------------------------------------

    def put(
        self, project: str, target: str, name: str, document: Any, policy: QueuePolicy, now_ms: int
    ) -> bool:
        """Create or replace the schedule; True when it is new. Writing what is stored
        already changes nothing but makes sure its next tick exists, so a deploy script may
        write it every time."""
        validation.queue_name(name)
        stored = documents.checked(document, now_ms, self.limits)
        self._check_message(stored["message"], policy)
        queue = names.definition_queue(target, name)
        store = self.stores.place(project, queue)
        current = store.get_metadata(project, queue)
        new = current is None or "schedule" not in current
        if current is None:
            self._check_quota(project, target)
            store.create_queue(project, queue, self._metadata(stored, 1, now_ms), now_ms)
        elif current.get("schedule") != stored:
            generation = int(current.get("generation", 0)) + 1
            store.set_metadata(project, queue, self._metadata(stored, generation, now_ms))
        # Every write: a write cut short may have left the tick queue without its
        # subscription; subscribing again answers the one there is.
        self._subscribe(project, names.tick_queue(target), now_ms)
        self._tick_next(project, target, name, now_ms)
        return new

    def patch(
        self, project: str, target: str, name: str, change: Any, policy: QueuePolicy, now_ms: int
    ) -> None:
        current = self._definition(project, target, name)
        self.put(project, target, name, documents.merged(current, change), policy, now_ms)

    def delete(self, project: str, target: str, name: str) -> None:
        for queue in (names.definition_queue(target, name), names.state_queue(target, name)):
            self.stores.for_queue(project, queue).delete_queue(project, queue)
            self.stores.forget(project, queue)

    def delete_all(self, project: str, target: str) -> None:
        """Delete every schedule of ``target`` (its queue or topic is being deleted)."""
        for name in self.names(project, target, None, 10**9):
            self.delete(project, target, name)
        ticks = names.tick_queue(target)
        self.stores.for_queue(project, ticks).delete_queue(project, ticks)
        self.stores.forget(project, ticks)

    def run(self, project: str, target: str, name: str, now_ms: int) -> str:
        """Fire once now without moving the plan: the posted message's id."""
        schedule = Schedule.of_stored(self._definition(project, target, name), now_ms)
        run = {f"run:{secrets.token_hex(8)}": now_ms}
        [fired] = self._post_fires(project, target, name, schedule, run, now_ms)
        self.lifecycle.scheduled(project, target, name, [fired], 0, now_ms)
        return fired.message_id

    # -- what clients read -------------------------------------------------------------------

    def get(self, project: str, target: str, name: str, now_ms: int) -> dict[str, Any]:
        """The stored body, with ``next`` (the next five slots, none when paused),
        ``last_fire`` (its slot, message id and when it fired) and ``fires``."""
        metadata = self._definition_metadata(project, target, name)
        if metadata is None:
            raise errors.NotFound(f"Schedule {name} does not exist in {topics.described(target)}")
        schedule = Schedule.of_stored(metadata["schedule"], int(metadata["written_ms"]))
        state = self._state(project, target, name)
        fires = int(state.get("fires", 0))
        after = max(now_ms, int(state.get("slot", 0)))
        upcoming = [] if schedule.paused else schedule.plan.next_slots(after, 5, fires)
        return {
            **schedule.stored,
            "name": name,
            "next": upcoming,
            "last_fire": {k: state[k] for k in ("slot", "message_id", "at") if k in state} or None,
            "fires": fires,
        }

    def names(self, project: str, target: str, marker: str | None, limit: int) -> list[str]:
        """Up to ``limit`` names of ``target``'s schedules after ``marker``, in order."""
        found: list[str] = []
        start = names.definition_queue(target, marker) if marker else names.prefix(target)
        while len(found) < limit:
            page = self.stores.list_queues(project, start, NAMES_PAGE, False)
            for info in page:
                if not info.name.startswith(names.prefix(target)):
                    return found
                name = names.schedule_of(info.name, target)
                if name is not None:
                    found.append(name)
                    if len(found) == limit:
                        return found
            if len(page) < NAMES_PAGE:
                return found
            start = page[-1].name
        return found

    # -- firing ------------------------------------------------------------------------------

    def fire(self, project: str, queue: str, tick_body: Any, now_ms: int) -> None:
        """Fire a tick of the tick queue ``queue``: post the slot's message (or, late after an
        outage, the slots ``misfire`` says), record it, post the next tick. The tick carries
        the fires before it, so a fire repeated after a crash posts the same messages under
        the same dedup ids and records the same state. Raises what the stores raise (the push
        is then retried); a tick of an older generation, or of a paused or deleted schedule,
        does nothing."""
        parsed = names.parse(queue)
        if parsed is None or parsed.kind != "ticks" or not isinstance(tick_body, dict):
            return
        target, name = parsed.target, str(tick_body.get("schedule", ""))
        metadata = self._definition_metadata(project, target, name)
        if metadata is None or tick_body.get("generation") != metadata.get("generation"):
            return
        schedule = Schedule.of_stored(metadata["schedule"], int(metadata["written_ms"]))
        if schedule.paused:
            return
        slot, fires = int(tick_body["slot"]), int(tick_body.get("fires", 0))
        due = schedule.plan.missed(slot - 1, max(now_ms, slot), fires)
        if due:
            # Keyed so that a repeat of this tick at another time posts nothing new: each slot
            # by itself with "all"; with "skip" the one message by the tick's own slot.
            keyed = {str(s): s for s in due} if schedule.plan.misfire == "all" else {}
            slots = keyed or {str(slot): due[-1]}
            fired = self._post_fires(project, target, name, schedule, slots, now_ms)
            fires += len(fired)
            last_id = fired[-1].message_id
            state = {"fires": fires, "slot": due[-1], "message_id": last_id, "at": now_ms}
            self._write_state(project, target, name, state, now_ms)
            passed = schedule.plan.passed(slot - 1, max(now_ms, slot), fires - len(fired))
            self.lifecycle.scheduled(
                project, target, name, fired, max(0, passed - len(fired)), now_ms
            )
        last = due[-1] if due else slot
        successor = f"after:{slot}"  # one successor per tick, whatever a repeat computes
        self._tick_after(project, target, name, metadata, schedule, last, fires, now_ms, successor)

    # -- inside ------------------------------------------------------------------------------

    def _post_fires(
        self,
        project: str,
        target: str,
        name: str,
        schedule: Schedule,
        slots: Mapping[str, int],
        now_ms: int,
    ) -> list[Fire]:
        """Post the message of each slot (by its dedup key) in one post, each due at its slot
        plus the message's own delay (now for a slot already past): what was posted."""
        message = schedule.message
        delay_ms = int(message.get("delay", 0)) * 1000
        posted = []
        for key, slot_ms in slots.items():
            one: dict[str, Any] = {
                "body": message["body"],
                "deliver_at": max(slot_ms + delay_ms, now_ms),
                "dedup_id": f"schedule:{name}:{key}",
            }
            if "ttl" in message:
                one["ttl"] = message["ttl"]
            posted.append(one)
        payload = jsondoc.dumps({"messages": posted}).encode()
        ids = self._post(project, target, payload, SCHEDULER_CLIENT_ID).ids
        return [
            Fire(slot_ms, one["deliver_at"], message_id)
            for slot_ms, one, message_id in zip(slots.values(), posted, ids, strict=True)
        ]

    def _tick_next(self, project: str, target: str, name: str, now_ms: int) -> None:
        metadata = self._definition_metadata(project, target, name)
        if metadata is None:
            return
        schedule = Schedule.of_stored(metadata["schedule"], int(metadata["written_ms"]))
        if schedule.paused:
            return
        state = self._state(project, target, name)
        after = max(now_ms, int(state.get("slot", 0)))
        fires = int(state.get("fires", 0))
        self._tick_after(project, target, name, metadata, schedule, after, fires, now_ms)

    def _tick_after(
        self,
        project: str,
        target: str,
        name: str,
        metadata: Metadata,
        schedule: Schedule,
        after_ms: int,
        fires: int,
        now_ms: int,
        key: str = "",
    ) -> None:
        """Post the tick of the first slot after ``after_ms`` (none when the plan is over),
        its dedup id made of ``key`` (by default the slot)."""
        upcoming = schedule.plan.next_slots(after_ms, 1, fires)
        if not upcoming:
            return
        slot = upcoming[0]
        due_ms = max(now_ms, slot - LEAD_MS)
        generation = metadata["generation"]
        body = jsondoc.dumps(
            {"schedule": name, "generation": generation, "slot": slot, "fires": fires}
        )
        ttl_s = max(3600, (due_ms - now_ms) // 1000 + 3600)
        dedup = f"tick:{name}:{generation}:{key or slot}"
        tick = NewMessage(body, ttl_s, due_ms - now_ms, dedup)
        queue = names.tick_queue(target)
        self.stores.place(project, queue).post_messages(
            project, queue, [tick], SCHEDULER_CLIENT_ID, now_ms
        )

    def _definition_metadata(self, project: str, target: str, name: str) -> Metadata | None:
        """The definition queue's metadata; None when the schedule does not exist."""
        queue = names.definition_queue(target, name)
        metadata = self.stores.for_queue(project, queue).get_metadata(project, queue)
        return metadata if metadata is not None and "schedule" in metadata else None

    def _definition(self, project: str, target: str, name: str) -> dict[str, Any]:
        metadata = self._definition_metadata(project, target, name)
        if metadata is None:
            raise errors.NotFound(f"Schedule {name} does not exist in {topics.described(target)}")
        return dict(metadata["schedule"])

    def _state(self, project: str, target: str, name: str) -> Metadata:
        queue = names.state_queue(target, name)
        return self.stores.for_queue(project, queue).get_metadata(project, queue) or {}

    def _write_state(
        self, project: str, target: str, name: str, state: Metadata, now_ms: int
    ) -> None:
        queue = names.state_queue(target, name)
        store = self.stores.place(project, queue)
        try:
            store.set_metadata(project, queue, state)
        except errors.QueueDoesNotExist:
            if not store.create_queue(project, queue, state, now_ms):
                store.set_metadata(project, queue, state)  # made meanwhile

    @staticmethod
    def _metadata(stored: Mapping[str, Any], generation: int, now_ms: int) -> Metadata:
        return {"schedule": dict(stored), "generation": generation, "written_ms": now_ms}

    def _subscribe(self, project: str, queue: str, now_ms: int) -> None:
        """The tick queue, delivered ticks deleted and failed ones retried long, and its one
        subscription (made confirmed: it is the server's own)."""
        store = self.stores.place(project, queue)
        ticks = {DELETE_AFTER_PUSH: True, RETRY_POLICY: TICK_RETRIES}
        store.create_queue(project, queue, ticks, now_ms)  # as it was, when it exists
        new = NewSubscription(SCHEDULE_SUBSCRIBER, SUBSCRIPTION_TTL_S, {}, secrets.token_hex(16))
        subscription_id, _ = store.create_subscription(project, queue, new, now_ms)
        store.confirm_subscription(project, queue, subscription_id, True, now_ms)

    def _check_message(self, message: Mapping[str, Any], policy: QueuePolicy) -> None:
        """The target's rules, checked when the schedule is written: its size limit."""
        size = documents.post_size(message)
        most = min(self.limits.max_messages_post_size, policy.max_messages_post_size or size)
        if size > most:
            raise errors.InvalidRequest(
                f"The schedule's message makes a post of {size} bytes; the queue takes at most "
                f"{most}."
            )

    def _check_quota(self, project: str, target: str) -> None:
        per_queue = self.limits.max_schedules_per_queue
        if per_queue and len(self.names(project, target, None, per_queue)) >= per_queue:
            raise errors.QuotaExceeded(
                f"{topics.described(target).capitalize()} has {per_queue} schedules, the most "
                "it may have ([transport] max_schedules_per_queue): delete one first."
            )
        per_project = self.limits.max_schedules_per_project
        if per_project and self._count_all(project, per_project) >= per_project:
            raise errors.QuotaExceeded(
                f"Project {project} has {per_project} schedules, the most it may have "
                "([transport] max_schedules_per_project): delete one first."
            )

    def _count_all(self, project: str, most: int) -> int:
        counted, start = 0, topics.INTERNAL
        while counted < most:
            page = self.stores.list_queues(project, start, NAMES_PAGE, False)
            counted += sum(
                (parsed := names.parse(info.name)) is not None and parsed.kind == "definition"
                for info in page
            )
            if len(page) < NAMES_PAGE:
                break
            start = page[-1].name
        return counted
