"""Firing ticks: each tick posts its slot's message, records the fire and posts the next tick.

A tick is a message of a target's tick queue, due ``LEAD_MS`` before its slot, which the push
machinery leases and hands over at its due time (``push/schedules.py``), several of one tick
queue at once when they fall due together. A fire posts the slot's message to the target with
``deliver_at`` the slot (so it is never seen before it) and the dedup id
``schedule:<name>:<slot>`` (so a fire repeated after a crash, or a replaced plan that keeps the
slot, posts it once), records the fire in the state queue, and posts the next tick (dedup id
``tick:<name>:<generation>:after:<slot>``, so a repeated tick cannot fork the chain). A tick
of an older generation (the schedule was written since) or of a paused or deleted schedule
fires nothing.

Ticks fired together share their store calls: one read of their definitions, one post of
their messages (in posts of at most ``max_messages_per_post``, halved while one is larger than
the target takes), one post of their next ticks.
When that fails, each tick is fired by itself, so that one schedule whose message the target
now refuses cannot hold back the others. A tick whose fire fails by itself has the failure
recorded for its schedule's readers (``failures.py``).
"""

from __future__ import annotations

import collections
import dataclasses
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from zaqar_delay import errors, jsondoc
from zaqar_delay.clock import Clock
from zaqar_delay.conf import Limits
from zaqar_delay.conf.transport import MAX_MESSAGE_TTL
from zaqar_delay.lifecycle import Lifecycle
from zaqar_delay.models import Fire, Metadata, NewMessage, Posted
from zaqar_delay.schedules import names
from zaqar_delay.schedules.document import Schedule, post_size
from zaqar_delay.schedules.failures import Failed, Failures
from zaqar_delay.schedules.records import Records

#: The client id of the messages fires post (a constant, so ``echo=false`` readers see them).
SCHEDULER_CLIENT_ID = uuid.uuid5(uuid.NAMESPACE_URL, "zaqar-delay:schedules").hex
#: How long before its slot a tick is due: the fire posts the message ahead of its slot (due
#: at the slot), so a dispatcher that runs up to this late still makes the slot. The chain of
#: ticks runs this far ahead of the slots, whatever the interval (less for a message delayed
#: about as long as a message may be: :func:`lead_ms`).
LEAD_MS = 2000
#: How long before it is owed a dispatcher may fire a tick (its lease-ahead, 50 ms), with room.
EARLY_MS = 100
#: A tick lives until it fires (``MAX_MESSAGE_TTL``, about 136 years): it is the only link to
#: its schedule's next slot, and one that expired unfired, however long no server ran, would
#: end the schedule. Its dedup id, which makes the successors that two ticks of one slot post
#: one tick, is remembered for this long after its post: two ticks of one slot are due
#: together and fire together (or fail together, and are retried at most 30 s apart), so this
#: covers both, and a schedule keeps no more of its ticks' ids than this holds slots.
TICK_DEDUP_S = 3600

#: The longest dedup key of a fire's message (a run's; a slot's is its epoch ms, 13 digits
#: until the year 2286), and the latest ``deliver_at`` (a slot is at most about 136 years
#: away): what a fire adds to its message, at its largest (``fire_post_size``).
RUN_KEY_BYTES = 8
LONGEST_KEY = "run:" + "f" * 2 * RUN_KEY_BYTES
LATEST = 10**13 - 1

# (project, queue, ``{"messages": [...]}`` payload, client id): ``Service.post_messages``.
Post = Callable[[str, str, bytes, str], Posted]


@dataclasses.dataclass(frozen=True, slots=True)
class Firing:
    """A tick that fires: its schedule, the slots it posts now (by dedup key: none when the
    tick only passes the chain on), what it knows of the fires before it, the latest slot an
    earlier fire of the schedule already stood for, whether it posts for the latest slot
    alone (``skip``: ``_placed``), and the slots an earlier attempt of it posted without
    recording them, posted again first to be counted (``again``, by dedup key)."""

    name: str
    metadata: Metadata
    schedule: Schedule
    tick_slot: int
    fires_before: int
    slots: Mapping[str, int]
    covered_ms: int = 0
    latest_only: bool = False
    again: Mapping[str, int] = dataclasses.field(default_factory=dict)


def lead_ms(schedule: Schedule, max_delay_s: int) -> int:
    """How long before its slot a tick of ``schedule`` is due: ``LEAD_MS``, or less when its
    message is delayed about as long as a message may be (``max_delay_s``): the message is
    posted due at its slot plus its delay, and a post is refused a due time further ahead
    than that, even from a tick fired ``EARLY_MS`` before it is owed. Such a message is
    posted at or just after its slot, still ahead of its due time (one delayed the most
    there is, ``EARLY_MS`` after the slot: the lead is then negative)."""
    delay_ms = int(schedule.message.get("delay", 0)) * 1000
    return min(LEAD_MS, max_delay_s * 1000 - delay_ms - EARLY_MS)


def successor(
    name: str,
    metadata: Metadata,
    schedule: Schedule,
    after_ms: int,
    fires: int,
    now_ms: int,
    max_delay_s: int,
    key: str = "",
) -> NewMessage | None:
    """The tick of the schedule's first slot after ``after_ms`` (None when the plan is over),
    due :func:`lead_ms` before it, its dedup id made of ``key`` (by default the slot)."""
    upcoming = schedule.plan.next_slots(after_ms, 1, fires)
    if not upcoming:
        return None
    slot = upcoming[0]
    due_ms = max(now_ms, slot - lead_ms(schedule, max_delay_s))
    generation = metadata["generation"]
    body = jsondoc.dumps({"schedule": name, "generation": generation, "slot": slot, "fires": fires})
    dedup_id = f"tick:{name}:{generation}:{key or slot}"
    return NewMessage(body, MAX_MESSAGE_TTL, due_ms - now_ms, dedup_id, dedup_ttl_s=TICK_DEDUP_S)


class Ticks:
    """Fires the ticks of every project's tick queues, over ``records``; ``post`` posts the
    messages with the target's rules (``Service.post_messages``), which read ``clock``."""

    def __init__(
        self, records: Records, limits: Limits, post: Post, lifecycle: Lifecycle, clock: Clock
    ) -> None:
        self.records = records
        self.failures = Failures(records)
        self.limits = limits
        self._post = post
        self.lifecycle = lifecycle
        self.clock = clock

    def fire_many(
        self, project: str, queue: str, tick_bodies: Sequence[Any], now_ms: int
    ) -> list[Exception | None]:
        """Fire ticks of the tick queue ``queue``: for each, None (fired, or nothing to fire)
        or what the stores raised (the tick is then fired again later). A tick repeated
        after a crash posts the same messages under the same dedup ids and records the same
        state."""
        parsed = names.parse(queue)
        outcomes: list[Exception | None] = [None] * len(tick_bodies)
        if parsed is None or parsed.kind != "ticks":
            return outcomes
        # Ticks of distinct schedules go together; a second tick of one schedule (a stale
        # generation, a repeat) goes alone, after.
        seen: set[str] = set()
        together: list[int] = []
        groups: collections.deque[list[int]] = collections.deque()
        for index, body in enumerate(tick_bodies):
            if not isinstance(body, dict):
                continue
            name = str(body.get("schedule", ""))
            if name in seen:
                groups.append([index])
            else:
                together.append(index)
                seen.add(name)
        groups.appendleft(together)
        # The state each schedule's fires in this call reached, written or not: a later tick
        # of the schedule here posts nothing it already stood for, and records that state.
        covered: dict[str, Metadata] = {}
        while groups:
            group = groups.popleft()
            if not group:
                continue
            bodies = [tick_bodies[i] for i in group]
            try:
                self._fire_together(project, parsed.target, bodies, now_ms, covered)
            except Exception as exc:  # noqa: BLE001 - a store or a rule that fails this group
                if len(group) == 1:
                    outcomes[group[0]] = exc
                else:  # each by itself, before the later ticks of the same schedules
                    groups.extendleft([index] for index in reversed(group))
        failed = _failed(tick_bodies, outcomes)
        for name in failed:
            self.lifecycle.fire_failed(project, parsed.target, name)
        self.failures.record(project, parsed.target, failed, now_ms)
        return outcomes

    def post_fires(
        self, project: str, target: str, firings: Sequence[Firing], now_ms: int
    ) -> dict[str, list[Fire]]:
        """Post the message of each firing's slots, each due at its slot plus the message's
        own delay, in posts of at most ``max_messages_per_post``: what each schedule posted.
        A message whose time has passed is due when posted: ``deliver_at`` is then the clock
        read just before its post, not when the fire began (the reads and posts before it
        may have taken a while, and a post is refused a time long past)."""
        planned: list[tuple[Firing, str, int, bool, dict[str, Any]]] = []
        delays = {f.name: int(f.schedule.message.get("delay", 0)) * 1000 for f in firings}
        for firing in firings:
            message = firing.schedule.message
            one = {"body": message["body"]} | ({"ttl": message["ttl"]} if "ttl" in message else {})
            planned += [(firing, key, slot, False, one) for key, slot in firing.again.items()]
            planned += [(firing, key, slot, True, one) for key, slot in firing.slots.items()]
        fired: dict[str, list[Fire]] = collections.defaultdict(list)
        most = max(1, self.limits.max_messages_per_post)
        for start in range(0, len(planned), most):
            chunk = planned[start : start + most]
            posting_ms = max(now_ms, self.clock.now_ms())
            placed = [
                (firing, *_placed(firing, key, slot_ms, delays[firing.name], posting_ms, new), one)
                for firing, key, slot_ms, new, one in chunk
            ]
            messages = [
                {**one, "dedup_id": names.fire_dedup_id(firing.name, key), "deliver_at": due_ms}
                for firing, key, _, due_ms, one in placed
            ]
            posted = self._post_fitting(project, target, messages)
            for index, (firing, _, slot_ms, due_ms, _) in enumerate(placed):
                name, repeated = firing.name, index in posted.duplicates
                fired[name].append(Fire(slot_ms, due_ms, posted.ids[index], delays[name], repeated))
        return fired

    def _post_fitting(self, project: str, target: str, messages: list[dict[str, Any]]) -> Posted:
        """Post ``messages``, in halves while a post of them is larger than the target takes
        (catching up many slots, or the messages of many schedules): ids in their order, and
        the positions the target remembered. A message larger alone fails its fire."""
        payload = jsondoc.dumps({"messages": messages}).encode()
        try:
            return self._post(project, target, payload, SCHEDULER_CLIENT_ID)
        except errors.PostTooLarge:
            if len(messages) == 1:
                raise
        half = len(messages) // 2
        first = self._post_fitting(project, target, messages[:half])
        second = self._post_fitting(project, target, messages[half:])
        shifted = tuple(half + index for index in second.duplicates)
        return Posted(first.ids + second.ids, first.duplicates + shifted)

    def _fire_together(
        self,
        project: str,
        target: str,
        tick_bodies: Sequence[dict[str, Any]],
        now_ms: int,
        covered: dict[str, Metadata],
    ) -> None:
        """Fire ticks of distinct schedules of ``target`` with shared store calls; ``covered``
        holds and gets the state each schedule's earlier fires in this call reached (its
        ``through``: the latest slot they stood for), whether it was written or not."""
        by_name = {str(body.get("schedule", "")): body for body in tick_bodies}
        definitions, stored = self.records.definitions_and_states(project, target, by_name)
        firings = []
        for name, body in by_name.items():
            recorded = covered.get(name) or stored[name]
            if firing := self._firing(name, body, definitions[name], recorded, now_ms):
                firings.append(firing)
        firings = [self._counting_an_earlier_post(project, target, f, now_ms) for f in firings]
        posting = [firing for firing in firings if firing.slots or firing.again]
        fired = self.post_fires(project, target, posting, now_ms)
        states, ticks = {}, []
        for firing in firings:
            schedule, posted = firing.schedule, fired.get(firing.name, [])
            fires, last = firing.fires_before + len(posted), firing.tick_slot
            after = max(last, firing.covered_ms)
            if posted:
                last = posted[-1].slot_ms
                after = _stands_for(schedule, posted[-1])
                _, spanned = schedule.plan.catch_up(
                    firing.tick_slot - 1, after, firing.fires_before
                )
                self._report(project, target, firing, posted, spanned, now_ms)
                states[firing.name] = covered[firing.name] = {
                    "fires": fires,
                    "slot": last,
                    "through": after,
                    "message_id": posted[-1].message_id,
                    "at": now_ms,
                }
            elif firing.name in covered:  # an earlier fire here, its state write maybe failed
                states[firing.name] = covered[firing.name]
            # One successor per tick, whatever a repeat of it computes.
            key = f"after:{firing.tick_slot}"
            most = self.limits.max_message_delay
            tick = successor(
                firing.name, firing.metadata, schedule, after, fires, now_ms, most, key
            )
            if tick is not None:
                ticks.append(tick)
        self.records.write_states(project, target, states, now_ms)
        self.records.post_ticks(project, target, ticks, SCHEDULER_CLIENT_ID, now_ms)

    def _counting_an_earlier_post(
        self, project: str, target: str, firing: Firing, now_ms: int
    ) -> Firing:
        """``firing``, or, for a late ``skip`` tick whose own slot's message the target
        remembers (an earlier attempt of this tick posted it and failed to record it, and
        the next slot has passed since), that message posted again first (a repeat: counted,
        answered with its id, not stored, journaled as a repeat), and the latest slot after
        it only if the ``limit`` leaves room. One dedup read, for late ``skip`` ticks only."""
        own = firing.tick_slot
        if not firing.latest_only or not firing.slots or own in firing.slots.values():
            return firing
        posted = [names.fire_dedup_id(firing.name, str(own))]
        if not self.records.stores.for_queue(project, target).remembers_dedup_ids(
            project, target, posted, now_ms
        ):
            return firing
        due, _ = firing.schedule.plan.catch_up(own, max(now_ms, own), firing.fires_before + 1)
        return dataclasses.replace(firing, slots={str(s): s for s in due}, again={str(own): own})

    def _report(
        self,
        project: str,
        target: str,
        firing: Firing,
        posted: Sequence[Fire],
        spanned: int,
        now_ms: int,
    ) -> None:
        """Journal and count the messages this fire posted, as soon as they are posted (a
        store call of the fire that fails afterwards has the tick fired again, and that
        repeat's messages are journaled as repeats, not counted), with the slots it skipped:
        those of the span it stood for, from its tick's slot (``spanned`` of them), that it
        did not post."""
        missed = max(0, spanned - len(posted))
        self.lifecycle.scheduled(project, target, firing.name, posted, missed, now_ms)

    @staticmethod
    def _firing(
        name: str,
        tick_body: Mapping[str, Any],
        metadata: Metadata | None,
        recorded: Metadata,
        now_ms: int,
    ) -> Firing | None:
        """What the tick fires (None: nothing, its schedule was deleted, paused or written
        since): the slots ``misfire`` says are due, each keyed by its slot, so that a repeat
        of this tick posts nothing new (with ``skip``, the one slot it posts for is the latest
        by its post: ``_placed``). ``recorded`` is the schedule's state as its latest fire
        left it (its ``through``: the latest slot that fire stood for). A ``skip`` tick whose
        slot an earlier fire already stood for (the tick a rewrite of the schedule posted
        beside a late one, or this tick fired again) posts nothing, and passes the chain on
        after that fire."""
        if metadata is None or tick_body.get("generation") != metadata.get("generation"):
            return None
        schedule = Schedule.of_stored(metadata["schedule"], int(metadata["written_ms"]))
        if schedule.paused:
            return None
        slot, fires = int(tick_body["slot"]), int(tick_body.get("fires", 0))
        through_ms = int(recorded.get("through") or recorded.get("slot") or 0)
        skip = schedule.plan.misfire == "skip"
        if skip or slot > through_ms:
            # The recorded fires are all before this tick's slot, or (``skip``) the chain goes
            # on after them: a tick a rewrite posted beside a late one counts them too (an
            # ``all`` tick fired again after later fires counts from its own, posted again).
            fires = max(fires, int(recorded.get("fires", 0)))
        if skip and slot <= through_ms:
            return Firing(name, metadata, schedule, slot, fires, {}, through_ms)
        due, _ = schedule.plan.catch_up(slot - 1, max(now_ms, slot), fires)
        slots = {str(s): s for s in due}  # with skip, the latest alone
        return Firing(name, metadata, schedule, slot, fires, slots, latest_only=skip)


def _failed(tick_bodies: Sequence[Any], outcomes: Sequence[Exception | None]) -> Failed:
    """Each schedule whose tick failed, with the tick and what it raised (its last tick
    that failed, when several did)."""
    return {
        str(body.get("schedule", "")): (body, outcome)
        for body, outcome in zip(tick_bodies, outcomes, strict=True)
        if outcome is not None
    }


def _stands_for(schedule: Schedule, last: Fire) -> int:
    """The latest slot the schedule's ``last`` fire stands for: its own, or, for a late
    ``skip`` message (a catch-up, due when the store took it), every slot whose message would
    have been due by then. A store slow to take that post (after a restart, say) would
    otherwise see the next slot fire a second message beside it."""
    if schedule.plan.misfire != "skip" or not last.late:
        return last.slot_ms
    return last.due_ms - last.delay_ms


def fire_post_size(name: str, message: Mapping[str, Any]) -> int:
    """The most bytes a fire of schedule ``name`` posts ``message`` in: its body and ttl, with
    the dedup id (of the longest key, a run's) and the ``deliver_at`` each fire adds."""
    posted = {k: message[k] for k in ("body", "ttl") if k in message}
    dedup_id = names.fire_dedup_id(name, LONGEST_KEY)
    return post_size({**posted, "dedup_id": dedup_id, "deliver_at": LATEST})


def _placed(
    firing: Firing, key: str, slot_ms: int, delay_ms: int, posting_ms: int, new: bool
) -> tuple[str, int, int]:
    """A message's dedup key, slot and due time when posted at ``posting_ms``: its slot plus
    its delay, or ``posting_ms`` once that has passed. A new ``skip`` catch-up (not one of
    ``Firing.again``) stands for the latest slot whose time has passed by then (the fire's
    reads may have taken a while), and is keyed by it: any two fires of the schedule that
    would post for one slot (a tick fired again, the tick a rewrite posted beside a late
    one) post one message."""
    if firing.latest_only and new:
        fired = firing.fires_before + len(firing.again)
        later, _ = firing.schedule.plan.catch_up(slot_ms, posting_ms - delay_ms, fired)
        if later:
            slot_ms, key = later[-1], str(later[-1])
    return key, slot_ms, max(slot_ms + delay_ms, posting_ms)
