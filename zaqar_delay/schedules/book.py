"""Recurring schedules of queues and topics: written, read, run, and fired once per slot.

Each schedule is two queues of the server's own (``schedules/names.py``, kept through
``records.py``): its definition, written by clients, and its state, written by its fires. Its
next slot is a *tick*, which the push machinery hands to :meth:`Schedules.fire_many` at its due
time, on whichever server process (``firing.py``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from zaqar_delay import errors, topics, validation
from zaqar_delay.clock import Clock
from zaqar_delay.conf import Limits
from zaqar_delay.encryption import QueueEncryption
from zaqar_delay.lifecycle import Lifecycle
from zaqar_delay.models import Metadata, NewSubscription
from zaqar_delay.policy import DELETE_AFTER_PUSH, QueuePolicy
from zaqar_delay.schedules import document as documents
from zaqar_delay.schedules import names, sealing
from zaqar_delay.schedules.document import Schedule
from zaqar_delay.schedules.failures import current as current_failure
from zaqar_delay.schedules.firing import (
    LEAD_MS,
    RUN_KEY_BYTES,
    SCHEDULER_CLIENT_ID,
    Firing,
    Post,
    Ticks,
    fire_post_size,
    successor,
)
from zaqar_delay.schedules.names import SCHEDULE_SUBSCRIBER
from zaqar_delay.schedules.records import KINDS, Records
from zaqar_delay.stores import Stores

SUBSCRIPTION_TTL_S = 100 * 366 * 86400
NAMES_PAGE = 200


# (project, target): creates the target queue or topic when it does not exist, within the
# project's queue quota (``Service.create_queue``, no metadata).
CreateTarget = Callable[[str, str], object]


class Schedules:
    """The schedules of every project's queues and topics, over ``stores``; ``post`` posts
    a fire's message with the target's rules (``Service.post_messages``), ``create_target``
    creates a schedule's queue when it does not exist."""

    def __init__(
        self,
        stores: Stores,
        limits: Limits,
        post: Post,
        lifecycle: Lifecycle,
        clock: Clock,
        create_target: CreateTarget,
        encryption: QueueEncryption,
    ) -> None:
        self.stores = stores
        self._create_target = create_target
        self.limits = limits
        self.lifecycle = lifecycle
        self.encryption = encryption
        self.records = Records(stores, encryption.cipher)
        self.ticks = Ticks(self.records, limits, post, lifecycle, clock)

    # -- what clients write ------------------------------------------------------------------

    def put(
        self, project: str, target: str, name: str, document: Any, policy: QueuePolicy, now_ms: int
    ) -> bool:
        """Create or replace the schedule; True when it is new. Writing what is stored
        already changes nothing but makes sure its next tick exists, so a deploy script may
        write it every time."""
        validation.queue_name(name)
        stored = documents.checked(document, now_ms, self.limits)
        self._check_message(name, stored["message"], policy)
        queue = names.definition_queue(target, name)
        current = self.stores.for_queue(project, queue).get_metadata(project, queue)
        if current is None:
            self._check_quota(project, target)
        # As subscribing does, writing a schedule creates its queue, so that its fires post
        # to a queue the project's quota has room for (they retry without end otherwise).
        self._create_target(project, target)
        store = self.records.store_of(project, target, queue)
        kept = self.records.as_definition(project, current)
        new = kept is None
        cipher = self.encryption.for_queue(policy)
        at_rest = sealing.sealed(stored, cipher, project, target)
        written = current
        if current is None:
            # A new schedule starts afresh: not from what a fire of an earlier one of its
            # name recorded after that one was deleted (its fires would count to its limit).
            self._delete_queues(project, self.records.leftovers(project, target, name))
            written = self._metadata(at_rest, first_generation(), now_ms)
            store.create_queue(project, queue, written, now_ms)
        elif kept is None or kept["schedule"] != stored:
            generation = int(current.get("generation", 0)) + 1
            written = self._metadata(at_rest, generation, now_ms)
            store.set_metadata(project, queue, written)
        elif sealing.is_sealed(current["schedule"]) != (cipher is not None):
            # The same schedule, kept as the queue now asks (it began or stopped encrypting
            # since): its generation and anchor stay, so its plan and its ticks go on.
            written = {**current, "schedule": at_rest}
            store.set_metadata(project, queue, written)
        # Every write: a write cut short may have left the tick queue without its
        # subscription; subscribing again answers the one there is.
        self._subscribe(project, target, now_ms)
        self._tick_next(project, target, name, written, now_ms)
        return new

    def patch(
        self, project: str, target: str, name: str, change: Any, policy: QueuePolicy, now_ms: int
    ) -> None:
        current = self._definition(project, target, name)
        self.put(project, target, name, documents.merged(current, change), policy, now_ms)

    def delete(self, project: str, target: str, name: str) -> None:
        self._delete_queues(project, [kind(target, name) for kind in KINDS])

    def delete_all(self, project: str, target: str) -> None:
        """Delete every queue of ``target``'s schedules (its queue or topic is being
        deleted): each schedule's, those a fire racing a schedule's deletion recreated
        (a state or an error with no definition), and its tick queue."""
        prefix = names.prefix(target)
        stored = list(self._stored_after(project, prefix, prefix))
        self._delete_queues(project, [*stored, names.tick_queue(target)])

    def _delete_queues(self, project: str, queues: Sequence[str]) -> None:
        for queue in queues:
            self.stores.for_queue(project, queue).delete_queue(project, queue)
            self.stores.forget(project, queue)

    def run(self, project: str, target: str, name: str, now_ms: int) -> str:
        """Fire once now without moving the plan: the posted message's id."""
        schedule = Schedule.of_stored(self._definition(project, target, name), now_ms)
        run = {f"run:{secrets.token_hex(RUN_KEY_BYTES)}": now_ms}
        firing = Firing(name, {}, schedule, now_ms, 0, run)
        [fired] = self.ticks.post_fires(project, target, [firing], now_ms)[name]
        self.lifecycle.scheduled(project, target, name, [fired], 0, now_ms)
        return fired.message_id

    # -- what clients read -------------------------------------------------------------------

    def get(self, project: str, target: str, name: str, now_ms: int) -> dict[str, Any]:
        """The schedule as :meth:`get_many` shows it; NotFound when it does not exist."""
        found = self.get_many(project, target, [name], now_ms)
        if not found:
            raise _missing(target, name)
        return found[0]

    def get_many(
        self, project: str, target: str, schedule_names: Sequence[str], now_ms: int
    ) -> list[dict[str, Any]]:
        """Each named schedule that exists, in order: the stored body, with ``next`` (the
        next five slots, none when paused), ``last_fire`` (its slot, message id and when it
        fired), ``fires`` and ``last_error`` (the failure of the fires since the last that
        succeeded: ``failures.current``). One read per store, whatever the number."""
        definitions, states, failures = self.records.read(project, target, schedule_names)
        shown = []
        for name in schedule_names:
            metadata, state = definitions[name], states[name]
            if metadata is None:
                continue  # deleted, or never written
            schedule = Schedule.of_stored(metadata["schedule"], int(metadata["written_ms"]))
            fires = int(state.get("fires", 0))
            after = max(now_ms, int(state.get("slot", 0)))
            upcoming = [] if schedule.paused else schedule.plan.next_slots(after, 5, fires)
            last = {k: state[k] for k in ("slot", "message_id", "at") if k in state} or None
            shown.append(
                {
                    **schedule.stored,
                    "name": name,
                    "next": upcoming,
                    "last_fire": last,
                    "fires": fires,
                    "last_error": current_failure(metadata, state, failures[name]),
                }
            )
        return shown

    def names(self, project: str, target: str, marker: str | None, limit: int) -> list[str]:
        """Up to ``limit`` names of ``target``'s schedules after ``marker``, in order."""
        found: list[str] = []
        start = names.definition_queue(target, marker) if marker else names.prefix(target)
        listed = self._stored_after(project, names.prefix(target), start)
        for stored in listed if limit > 0 else ():
            name = names.schedule_of(stored, target)
            if name is not None:
                found.append(name)
                if len(found) == limit:
                    break
        return found

    def _stored_after(self, project: str, prefix: str, start: str) -> Iterator[str]:
        """The stored names that start with ``prefix`` (a target's schedule queues, or all of
        the server's own) after ``start``, in order: the store's listing, ``NAMES_PAGE`` at a
        time, up to the first name without it."""
        while True:
            page = self.stores.list_queues(project, start, NAMES_PAGE, False)
            for info in page:
                if not info.name.startswith(prefix):
                    return
                yield info.name
            if len(page) < NAMES_PAGE:
                return
            start = page[-1].name

    # -- firing ------------------------------------------------------------------------------

    def fire_many(
        self, project: str, queue: str, tick_bodies: Sequence[Any], now_ms: int
    ) -> list[Exception | None]:
        """Fire ticks of the tick queue ``queue`` (``Ticks.fire_many``)."""
        return self.ticks.fire_many(project, queue, tick_bodies, now_ms)

    def fire(self, project: str, queue: str, tick_body: Any, now_ms: int) -> None:
        """Fire one tick; raises what the stores raised."""
        [failure] = self.fire_many(project, queue, [tick_body], now_ms)
        if failure is not None:
            raise failure

    # -- inside ------------------------------------------------------------------------------

    def _tick_next(
        self, project: str, target: str, name: str, metadata: Metadata | None, now_ms: int
    ) -> None:
        """Post the tick of the schedule's next slot after both now and its last fire
        (``metadata``: its definition as just written; none when it is not a schedule's)."""
        if metadata is None or "schedule" not in metadata:
            return
        schedule = Schedule.of_stored(metadata["schedule"], int(metadata["written_ms"]))
        if schedule.paused:
            return
        state = self.records.state(project, target, name)
        after = max(now_ms, int(state.get("slot", 0)))
        fires, most = int(state.get("fires", 0)), self.limits.max_message_delay
        tick = successor(name, metadata, schedule, after, fires, now_ms, most)
        if tick is not None:
            self.records.post_ticks(project, target, [tick], SCHEDULER_CLIENT_ID, now_ms)

    def _existing(self, project: str, target: str, name: str) -> Metadata:
        """The schedule's definition queue's metadata; NotFound when it does not exist."""
        metadata = self.records.definition(project, target, name)
        if metadata is None:
            raise _missing(target, name)
        return metadata

    def _definition(self, project: str, target: str, name: str) -> dict[str, Any]:
        return dict(self._existing(project, target, name)["schedule"])

    @staticmethod
    def _metadata(stored: Mapping[str, Any], generation: int, now_ms: int) -> Metadata:
        return {"schedule": dict(stored), "generation": generation, "written_ms": now_ms}

    def _subscribe(self, project: str, target: str, now_ms: int) -> None:
        """The target's tick queue, whose delivered ticks are deleted (failed ones are
        retried by ``names.TICK_RETRIES``), and its one subscription (made confirmed: it is
        the server's own)."""
        queue = names.tick_queue(target)
        store = self.records.store_of(project, target, queue)
        store.create_queue(project, queue, {DELETE_AFTER_PUSH: True}, now_ms)
        new = NewSubscription(SCHEDULE_SUBSCRIBER, SUBSCRIPTION_TTL_S, {}, secrets.token_hex(16))
        subscription_id, _ = store.create_subscription(project, queue, new, now_ms)
        store.confirm_subscription(project, queue, subscription_id, True, now_ms)

    def _check_message(self, name: str, message: Mapping[str, Any], policy: QueuePolicy) -> None:
        """The target's rules, checked when schedule ``name`` is written: its size limit,
        against the post of one fire (``fire_post_size``); and that its message lives past
        its due time (its ttl, counted from its post, up to ``LEAD_MS`` before its slot,
        longer than that and its delay)."""
        size = fire_post_size(name, message)
        most = policy.most_post_bytes(self.limits.max_messages_post_size)
        if size > most:
            raise errors.InvalidRequest(
                f"A fire of the schedule posts its message in {size} bytes (with the dedup id "
                f"and deliver_at each fire adds); the queue takes at most {most}."
            )
        ttl = message.get("ttl") or policy.message_ttl(self.limits.default_message_ttl)
        delay = int(message.get("delay", 0))
        if ttl * 1000 <= delay * 1000 + LEAD_MS:
            raise errors.InvalidRequest(
                f"The schedule's message would expire before it is due: its ttl ({ttl} s) "
                f"counts from its post, up to {LEAD_MS / 1000:g} s before its slot, and its "
                f"delay is {delay} s. Give it a ttl longer than its delay plus "
                f"{LEAD_MS / 1000:g} s."
            )

    def check_policy(
        self, project: str, target: str, before: QueuePolicy, after: QueuePolicy
    ) -> None:
        """Conflict when ``target``'s metadata, changed from ``before`` to ``after``, takes
        from one of its schedules what its message needs (``_check_message``): a smaller post
        size or a shorter default ttl. Reads its schedules only when one of them is lowered."""
        if not self._narrows(before, after):
            return
        marker = None
        while schedule_names := self.names(project, target, marker, NAMES_PAGE):
            definitions = self.records.definitions(project, target, schedule_names)
            for name, metadata in definitions.items():
                if metadata is None:
                    continue  # deleted since it was listed
                try:
                    self._check_message(name, metadata["schedule"]["message"], after)
                except errors.InvalidRequest as exc:
                    raise errors.Conflict(
                        f"Schedule {name} of {topics.described(target)} could not post its "
                        f"message after this change. {exc.description} Change or delete the "
                        "schedule first."
                    ) from exc
            marker = schedule_names[-1]

    def _narrows(self, before: QueuePolicy, after: QueuePolicy) -> bool:
        """Whether ``after`` takes smaller posts, or gives messages without a ttl of their
        own a shorter one, than ``before``."""
        post, ttl = self.limits.max_messages_post_size, self.limits.default_message_ttl
        smaller = after.most_post_bytes(post) < before.most_post_bytes(post)
        return smaller or after.message_ttl(ttl) < before.message_ttl(ttl)

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
        """The project's schedules, counted up to ``most``."""
        counted = 0
        for stored in self._stored_after(project, topics.INTERNAL, topics.INTERNAL):
            parsed = names.parse(stored)
            counted += parsed is not None and parsed.kind == "definition"
            if counted >= most:
                break
        return counted


def first_generation() -> int:
    """A new schedule's generation: one no earlier schedule of its name had, so that the
    ticks an earlier one left in the tick queue (deleting a schedule leaves them, to fire
    nothing) do not take it for theirs and run a second chain of ticks beside its own. Each
    rewrite adds one; JSON keeps it exact (below 2**53)."""
    return secrets.randbelow(2**52) + 1


def _missing(target: str, name: str) -> errors.NotFound:
    return errors.NotFound(f"Schedule {name} does not exist in {topics.described(target)}")
