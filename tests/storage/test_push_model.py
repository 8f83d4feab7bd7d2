"""Every store's push delivery held to one model, by a hypothesis state machine.

The machine subscribes to a queue, posts messages due now or later, and leases pushes (due
now, or ahead), settles them (delivered, delivered and consumed, or retried later), lets
leases run out, deletes messages and subscriptions and reschedules messages, earlier and
later, while a fake clock moves by steps that land on due times and lease ends to the
millisecond. A plain Python model (:class:`PushModel`) says what the store must answer:

- a lease takes only pushes owed by its time whose message is due by then and whose message
  and subscription are still there, and no push another lease holds; as many as there are,
  up to its limit, oldest first; each with its attempt count, and sent at the time it is owed
  or its message is due, whichever is later: never before the message is due;
- an outcome counts only while its own lease holds the push: delivered ends it, a retry owes
  it again at its time with one attempt more; a consumed message is deleted once no push of
  it is owed, and the settle names it;
- an earlier due time brings the message's pushes forward (``Driver.edit_message``) and says
  so; a later one holds them until then;
- ``next_push_ms`` is never later than the earliest push owed, and ``due_push_queues`` names
  the queue whenever a push of it can be leased now.

Where a store may do either of two things (a lease that stops at its limit among pushes owed
at one time; a push whose message is due later is owed again at that time only when a lease
looked at it), the model keeps both: each push's possible owed times.

A subscription may limit its dispatches (``_max_concurrent_dispatches`` 1 or 2,
``_max_dispatches_per_second`` 4). Its pushes are then held back (parked, or owed again at the
time the rate reserves), which the model does not time: it checks that no more of them are
leased at once than the limit, that their send times are a rate interval apart and never
passed when a lease hands them over (a lease that comes late sends one now and the others an
interval apart from then, not all at once), and, at the end of each example, that delivering whatever is leased until nothing is left delivers every
push owed (none is held back for good).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.helpers.stores import STORES
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import (
    Delivery,
    LeaseRequest,
    MessageEdit,
    NewMessage,
    NewSubscription,
    Settlement,
)
from zaqar_delay.storage.base import Driver

pytestmark = pytest.mark.parametrize("store_uri", [*STORES, "swift"], indirect=True)

P = "push-model"
CLIENT = "c" * 32
LEASE_MS = 10_000
DELAYS_MS = (0, 0, 1_000, 5_000, 30_000)
AHEAD_MS = (0, 0, 50, 1_000)
RETRIES_MS = (1, 2_000, 15_000)
# Steps that land on the delays, retries and lease ends above, and a millisecond either side.
STEPS_MS = (1, 49, 249, 999, 1_000, 4_000, 5_000, 9_999, 10_000, 25_000, 30_000)
LIMITS: list[dict[str, int]] = [
    {},
    {},
    {"_max_concurrent_dispatches": 1},
    {"_max_concurrent_dispatches": 2},
    {"_max_dispatches_per_second": 4},
    {"_max_concurrent_dispatches": 1, "_max_dispatches_per_second": 4},
]
RATE_INTERVAL_MS = 250
# Examples per store, fixed (derandomized) so that every run tries the same ones; MongoDB and
# Swift answer each call in milliseconds where Redis takes microseconds.
EXAMPLES = 100
SLOW_STORE_EXAMPLES = {"mongodb": 40, "swift": 6}
STEPS = 30


@dataclasses.dataclass
class ModelPush:
    """A push the store may still hold: the times it may be owed at (two when the store may or
    may not have owed it again at its message's due time), its attempts, and the lease that
    holds it (None: none since it was last settled)."""

    sid: str
    mid: str
    owed: set[int]
    attempts: int = 0
    lease: str | None = None


@dataclasses.dataclass
class ModelMessage:
    id: str
    body: Any
    due_ms: int
    gone: bool = False


class PushModel:
    """The pushes of one queue as the push contract (``storage/deliveries.py``) describes
    them."""

    def __init__(self) -> None:
        self.subscriptions: dict[str, bool] = {}  # id -> live
        self.limits: dict[str, dict[str, int]] = {}  # id -> its dispatch limits
        self.sent: dict[str, list[int]] = {}  # id -> the send times of its leases
        self.messages: dict[str, ModelMessage] = {}
        self.pushes: dict[str, ModelPush] = {}  # by delivery id

    def deliverable(self, push: ModelPush) -> bool:
        return self.subscriptions[push.sid] and not self.messages[push.mid].gone

    def timed(self, push: ModelPush) -> bool:
        """Whether the model knows when the store may lease the push: it is deliverable, and
        no dispatch limit holds it back."""
        return self.deliverable(push) and not self.limits[push.sid]

    def sent_at(self, push: ModelPush) -> set[int]:
        """When each possible owed time would have the push sent."""
        due = self.messages[push.mid].due_ms
        return {max(at, due) for at in push.owed}

    def owed_of(self, mid: str) -> list[ModelPush]:
        return [p for p in self.pushes.values() if p.mid == mid]

    def owed_live(self, mid: str) -> list[ModelPush]:
        """The message's pushes owed to a subscription that is still there."""
        return [p for p in self.owed_of(mid) if self.subscriptions[p.sid]]


def delivery_id(sid: str, mid: str) -> str:
    return f"{sid}:{mid}"


class PushMachine(RuleBasedStateMachine):
    """One queue of ``driver`` (a new one per example) against :class:`PushModel`."""

    driver: Driver
    clock: FakeClock
    queues: itertools.count[int]

    def __init__(self) -> None:
        super().__init__()
        self.queue = f"q{next(self.queues)}"
        self.model = PushModel()
        self.outstanding: list[Delivery] = []  # leased, not settled by this machine
        self.bodies = itertools.count()

    def now(self) -> int:
        return self.clock.now_ms()

    @initialize(limits=st.lists(st.sampled_from(LIMITS), min_size=1, max_size=2))
    def create(self, limits: list[dict[str, int]]) -> None:
        self.driver.create_queue(P, self.queue, {}, self.now())
        for options in limits:
            self.subscribe(options)

    @precondition(lambda self: len(self.model.subscriptions) < 4)
    @rule(options=st.sampled_from(LIMITS))
    def subscribe(self, options: dict[str, int]) -> None:
        """A subscription is owed the messages posted from then on."""
        n = len(self.model.subscriptions)
        new = NewSubscription(f"http://127.0.0.1:9/{n}", 10**6, options, "s")
        sid, created = self.driver.create_subscription(P, self.queue, new, self.now())
        assert created and sid not in self.model.subscriptions
        self.model.subscriptions[sid] = True
        self.model.limits[sid] = options
        self.model.sent[sid] = []

    @precondition(lambda self: any(self.model.subscriptions.values()))
    @rule(index=st.integers(0, 3))
    def unsubscribe(self, index: int) -> None:
        live = [sid for sid, alive in self.model.subscriptions.items() if alive]
        sid = live[index % len(live)]
        self.driver.delete_subscription(P, self.queue, sid)
        self.model.subscriptions[sid] = False

    @rule(delays=st.lists(st.sampled_from(DELAYS_MS), min_size=1, max_size=3))
    def post(self, delays: list[int]) -> None:
        now = self.now()
        bodies = [{"n": next(self.bodies)} for _ in delays]
        new = [NewMessage(json.dumps(b), 3_600, d) for b, d in zip(bodies, delays, strict=True)]
        posted = self.driver.post_messages(P, self.queue, new, CLIENT, now)
        live = [sid for sid, alive in self.model.subscriptions.items() if alive]
        assert posted.push_due_ms == (now + min(delays) if live else 0)
        for mid, body, delay in zip(posted.ids, bodies, delays, strict=True):
            self.model.messages[mid] = ModelMessage(mid, body, now + delay)
            for sid in live:
                self.model.pushes[delivery_id(sid, mid)] = ModelPush(sid, mid, {now + delay})

    @rule(step_ms=st.sampled_from(STEPS_MS))
    def advance(self, step_ms: int) -> None:
        self.clock.advance(ms=step_ms)

    def pick(self, index: int) -> ModelMessage | None:
        alive = [m for m in self.model.messages.values() if not m.gone]
        return alive[index % len(alive)] if alive else None

    @rule(index=st.integers(0, 20))
    def delete_message(self, index: int) -> None:
        message = self.pick(index)
        if message is not None:
            self.driver.delete_message(P, self.queue, message.id, None, self.now())
            message.gone = True

    @rule(index=st.integers(0, 20), delay_ms=st.sampled_from((0, 1, 999, 2_000, 45_000)))
    def reschedule(self, index: int, delay_ms: int) -> None:
        message = self.pick(index)
        if message is None:
            return
        now = self.now()
        new_ms, old_ms = now + delay_ms, message.due_ms
        edit = MessageEdit(message.id, None, due_ms=new_ms)
        answered = self.driver.edit_message(P, self.queue, edit, now)
        message.due_ms = new_ms
        surely, maybe = False, False
        if new_ms < old_ms:
            for push in self.model.owed_of(message.id):
                if push.lease is not None and min(push.owed) > now:
                    continue  # a live lease holds it: owed at the lease's end
                if not self.model.timed(push):
                    # Gone or held back by a limit: owed the model does not know when.
                    maybe = True
                    push.owed.add(new_ms)
                    self.end_lease(push)
                    continue
                brought = {at for at in push.owed if new_ms < at <= old_ms}
                surely = surely or brought == push.owed
                maybe = maybe or bool(brought)
                push.owed = {new_ms if at in brought else at for at in push.owed}
                if brought:
                    self.end_lease(push)
        if surely:
            assert answered == new_ms
        elif maybe:
            assert answered in (0, new_ms)
        else:
            assert answered == 0

    # -- leases and outcomes -----------------------------------------------------------------

    @rule(limit=st.integers(1, 4), ahead_ms=st.sampled_from(AHEAD_MS))
    def lease(self, limit: int, ahead_ms: int) -> None:
        now = self.now()
        until = now + ahead_ms
        request = LeaseRequest(now, LEASE_MS, limit, until if ahead_ms else None)
        leased = self.driver.lease_pushes(P, self.queue, request)
        model = self.model
        deliverable = [p for p in model.pushes.values() if model.deliverable(p)]
        surely = {
            delivery_id(p.sid, p.mid)
            for p in deliverable
            if model.timed(p) and max(model.sent_at(p)) <= until
        }
        maybe = {delivery_id(p.sid, p.mid) for p in deliverable if min(model.sent_at(p)) <= until}
        got = [d.id for d in leased]
        assert len(set(got)) == len(got)
        assert set(got) <= maybe, f"leased what it may not: {set(got) - maybe}"
        assert min(limit, len(surely)) <= len(got) <= min(limit, len(maybe))
        if len(got) < limit:
            assert surely <= set(got), f"left what it had to lease: {surely - set(got)}"
        # Oldest first: nothing left behind that is surely owed before a push it took.
        for left in surely - set(got):
            for taken in got:
                assert max(model.pushes[left].owed) >= min(model.pushes[taken].owed), (left, taken)
        for delivery in leased:
            push = model.pushes[delivery.id]
            message = model.messages[push.mid]
            assert (delivery.subscription.id, delivery.message.id) == (push.sid, push.mid)
            assert delivery.message.body == message.body
            assert delivery.attempts == push.attempts
            if model.limits[push.sid]:
                # Held back until a place frees or the rate's time comes: never sooner.
                assert delivery.owed_ms >= min(model.sent_at(push))
                if model.limits[push.sid].get("_max_dispatches_per_second"):
                    assert delivery.owed_ms >= now, "a time of the rate that passed"
            else:
                assert delivery.owed_ms in model.sent_at(push)
            assert delivery.owed_ms >= message.due_ms  # never before it is due
            push.owed, push.lease = {until + LEASE_MS}, delivery.lease
            model.sent[push.sid].append(delivery.owed_ms)
            self.outstanding.append(delivery)
        self.owe_again_at_due(until, sure=len(got) < limit)
        self.check_limits()

    def check_limits(self) -> None:
        """No more pushes of a subscription under a live lease than its concurrency; its
        pushes sent a rate interval apart."""
        now, model = self.now(), self.model
        for sid, limits in model.limits.items():
            concurrency = limits.get("_max_concurrent_dispatches")
            if concurrency and model.subscriptions[sid]:
                held = [
                    p
                    for p in model.pushes.values()
                    if p.sid == sid and p.lease is not None and min(p.owed) > now
                ]
                assert len(held) <= concurrency, (sid, len(held))
            if limits.get("_max_dispatches_per_second"):
                sent = sorted(model.sent[sid])
                gaps = [later - earlier for earlier, later in itertools.pairwise(sent)]
                assert all(gap >= RATE_INTERVAL_MS for gap in gaps), sent

    def owe_again_at_due(self, until: int, sure: bool) -> None:
        """A lease owes a push it looked at and left, its message due after the lease's time,
        again at that due time (every such push when it took fewer than its limit: it looked
        at all of them), and drops one whose message or subscription is gone."""
        model = self.model
        for push in list(model.pushes.values()):
            if not model.deliverable(push) and min(push.owed) <= until:
                # Gone with its message or subscription, perhaps dropped: its lease with it.
                self.end_lease(push)
                continue
            due = model.messages[push.mid].due_ms
            if model.timed(push) and due > until:
                looked = {at for at in push.owed if at <= until}
                if looked:
                    push.owed = (push.owed - looked if sure else push.owed) | {due}
                    self.end_lease(push)

    def end_lease(self, push: ModelPush) -> None:
        """The push is owed again (perhaps): the lease that held it is over, its outcome
        ignored from now on (perhaps), so the machine records none."""
        push.lease = None
        key = delivery_id(push.sid, push.mid)
        self.outstanding = [d for d in self.outstanding if d.id != key]

    def settleable(self, delivery: Delivery) -> bool:
        """Whether the model knows if the store records an outcome of ``delivery``: not for a
        push of a limited subscription whose lease may have ended by its limit (parked, or
        owed at the rate's time, once a lease looked at it after its end)."""
        push = self.model.pushes.get(delivery.id)
        if push is None or push.lease != delivery.lease or not self.model.limits[push.sid]:
            return True
        return min(push.owed) > self.now() + max(AHEAD_MS)

    # No precondition on what leases took: which pushes tied at one time a lease takes is the
    # store's choice, and a precondition on it would make hypothesis's replays differ.
    @rule(
        picks=st.lists(
            st.tuples(st.integers(0, 20), st.sampled_from((None, None, *RETRIES_MS))),
            min_size=1,
            max_size=3,
        ),
        consume=st.booleans(),
    )
    def settle(self, picks: list[tuple[int, int | None]], consume: bool) -> None:
        now = self.now()
        settleable = [i for i, d in enumerate(self.outstanding) if self.settleable(d)]
        if not settleable:
            return
        chosen: dict[int, int | None] = {}
        for index, retry in picks:
            chosen.setdefault(settleable[index % len(settleable)], retry)
        outcomes = [
            (self.outstanding[i], None if retry is None else now + retry)
            for i, retry in chosen.items()
        ]
        self.outstanding = [d for i, d in enumerate(self.outstanding) if i not in chosen]
        self.settle_outcomes(outcomes, consume)

    @rule(picks=st.lists(st.integers(0, 20), min_size=1, max_size=3))
    def give_back(self, picks: list[int]) -> None:
        """A stopping dispatcher gives back pushes it leased and has not sent: owed again at
        their time, with no attempt more; not sent, they took no time of their rate."""
        settleable = [i for i, d in enumerate(self.outstanding) if self.settleable(d)]
        if not settleable:
            return
        chosen = {settleable[index % len(settleable)] for index in picks}
        given = [(d, d.owed_ms) for i, d in enumerate(self.outstanding) if i in chosen]
        self.outstanding = [d for i, d in enumerate(self.outstanding) if i not in chosen]
        for delivery, _ in given:
            self.model.sent[delivery.subscription.id].remove(delivery.owed_ms)
        self.settle_outcomes(list(given), consume=False, unsent=True)

    def settle_outcomes(
        self, outcomes: list[tuple[Delivery, int | None]], consume: bool, unsent: bool = False
    ) -> None:
        """Record ``outcomes`` (consumed too, when ``consume``; as given back unsent, when
        ``unsent``), in the store and the model."""
        consumed_ids = [d.id for d, retry_at in outcomes if consume and retry_at is None]
        unsent_ids = [d.id for d, _ in outcomes] if unsent else []
        answered = self.driver.settle_pushes(
            P, self.queue, Settlement(outcomes, consumed_ids, unsent_ids), self.now()
        )
        consumed: list[str] = []
        model = self.model
        for delivery, retry_at in outcomes:
            push = model.pushes.get(delivery.id)
            if push is None or push.lease != delivery.lease:
                continue  # its lease ran out and another took the push: ignored
            if retry_at is not None:
                attempted = 0 if unsent else 1
                push.owed, push.attempts, push.lease = {retry_at}, push.attempts + attempted, None
                continue
            del model.pushes[delivery.id]
            message = model.messages[push.mid]
            if delivery.id in consumed_ids and not message.gone and not model.owed_live(push.mid):
                message.gone = True
                consumed.append(push.mid)
        assert sorted(answered) == sorted(consumed)

    # -- reads ---------------------------------------------------------------------------------

    @rule()
    def check(self) -> None:
        now = self.now()
        model = self.model
        earliest = [min(model.sent_at(p)) for p in model.pushes.values() if model.timed(p)]
        next_ms = self.driver.next_push_ms()
        if earliest:
            assert next_ms is not None and next_ms <= min(earliest), (next_ms, min(earliest))
        due_now = [
            p for p in model.pushes.values() if model.timed(p) and max(model.sent_at(p)) <= now
        ]
        if due_now:
            assert (P, self.queue) in self.driver.due_push_queues(now, 1_000)
        alive = sorted(m.id for m in model.messages.values() if not m.gone)
        stored = self.driver.get_messages(P, self.queue, list(model.messages), now)
        assert sorted(m.id for m in stored) == alive

    def drain(self) -> None:
        """Lease and deliver until nothing is owed: every push is delivered in the end, none
        held back for good by a dispatch limit."""
        model = self.model
        # Leases not settled are left to run out: their places come back then.
        self.outstanding = []
        owed = [p for p in model.pushes.values() if model.deliverable(p)]
        # Each push is leased in a round, or after a round that waits for it (its time, a
        # place, the rate); the leases left to run out free their places within a few.
        rounds = 20 + 3 * len(owed)
        for _ in range(rounds):
            if not owed:
                return
            self.lease(limit=10, ahead_ms=0)
            leased, self.outstanding = self.outstanding, []
            self.settle_outcomes([(d, None) for d in leased], consume=False)
            if not leased:
                # As a dispatcher does: on to the next time the store says a push is owed,
                # or a second on when that has come (a place to free, a lease to run out).
                next_ms = self.driver.next_push_ms()
                wait_ms = 0 if next_ms is None else next_ms - self.now()
                self.clock.advance(ms=wait_ms if wait_ms > 0 else 1_000)
            owed = [p for p in model.pushes.values() if model.deliverable(p)]
        raise AssertionError(f"still owed after {rounds} rounds: {owed}")

    def teardown(self) -> None:
        try:
            self.check()
            self.drain()
        finally:
            self.driver.delete_queue(P, self.queue)


def test_every_store_delivers_as_the_push_model(
    driver: Driver, clock: FakeClock, request: pytest.FixtureRequest
) -> None:
    store = request.node.callspec.params["store_uri"]
    machine = type(
        "Machine",
        (PushMachine,),
        {"driver": driver, "clock": clock, "queues": itertools.count()},
    )
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=SLOW_STORE_EXAMPLES.get(store, EXAMPLES),
            stateful_step_count=STEPS,
            deadline=None,
            derandomize=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
