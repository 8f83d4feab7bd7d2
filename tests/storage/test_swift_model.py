"""The Swift driver's claim slots and index entries, driven by a hypothesis state machine.

Two driver processes share one Swift account kept in memory (``tests.helpers.memory_swift``):
they post, claim, renew, release, delete, reschedule and pop on one queue while the clock
moves, one at a time or (``claim_beside``) a claim beside another operation, their requests
answered in an order the test draws. The test crashes them between any two requests (a
request lost, or applied with its answer lost), overtakes their updates (409), lets listings
lag behind writes, lets the request after a replacement miss the object and lets a
create-only write store over a concurrent creation not read back yet. After every step the
outcomes are held to the delay contract:

- a message is never handed out before it is due;
- a message is never in two live claims, and one deleted is never handed out again;
- a message whose post returned is never lost: once every process is restarted and every
  claim and grace period has run out, draining the queue hands out each one exactly once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

from testbed.swift_aio import SwiftAllInOne
from tests.helpers.memory_swift import (
    Fault,
    MemorySwift,
    Process,
    TakingTurns,
    faulty_client,
    memory_client,
)
from zaqar_delay import errors
from zaqar_delay.models import Claim, ClaimTimes, Deletion, Message, MessageEdit, NewMessage
from zaqar_delay.storage.bounds import CLOCK_DISAGREEMENT_MS
from zaqar_delay.storage.swift import connect, lifecycle, names
from zaqar_delay.storage.swift.connect import SwiftClient
from zaqar_delay.storage.swift.driver import SwiftDriver
from zaqar_delay.storage.swift.slots import Slot, slot_from_document
from zaqar_delay.storage.swift.timing import ORPHAN_GRACE_MS, TAKER_GRACE_MS

P, Q = "p", "q"
TTL_S = 86_400
CLAIM_TTL_S = (30, 60, 120)
DELAYS_MS = (0, 0, 1_000, 5_000, 30_000)
DRAIN_ROUNDS = 200
DRAIN_EMPTY_CLAIMS = 3


def seen(what: str) -> None:
    """Count ``what`` in hypothesis's statistics (nothing outside a hypothesis test)."""
    with contextlib.suppress(InvalidArgument):
        event(what)


@dataclasses.dataclass(frozen=True)
class StoredState:
    """A message's state by ``lifecycle.state_of``, and the entries and slot it was read from."""

    found: lifecycle.State | None
    entries: tuple[str, ...]
    latest: Slot


@dataclasses.dataclass
class ModelClaim:
    """A claim a consumer holds: live until ``expires_ms``, unless released."""

    expires_ms: int
    messages: set[str]


# What process a does while process b claims (``SwiftSlotMachine.claim_beside``). Not a claim
# then its renewal: b may read the slot a's claim then creates before a creates it, and stall
# until a renews it, its creation landing just as the renewal replaces the slot (left open:
# ``doc/source/design.rst``, "A create-only write racing an update").
CHANGES = ("claim", "renew", "release", "delete", "reschedule", "pop")


class SwiftSlotMachine(RuleBasedStateMachine):
    """Posts, claims and their ends on two processes of one Swift account, with faults."""

    claims = Bundle("claims")

    def __init__(self) -> None:
        super().__init__()
        self.swift: MemorySwift = TakingTurns()
        # A request right after an update replacing an object misses it (a create-only write
        # stores over it, a read answers 404), as on a real object server.
        self.swift.replacement_windows = True
        self.namespace = f"zd{uuid.uuid4().hex[:12]}"
        self.processes = [Process("a"), Process("b")]
        self.drivers = [self._start(process) for process in self.processes]
        self.now = (int(time.time()) // 60) * 60_000
        # Messages whose post returned, by id: their due time as far as it is known.
        self.due: dict[str, int] = {}
        self.earliest_due: dict[str, int] = {}
        self.unsure_posts = 0
        self.deleted: set[str] = set()
        self.maybe_deleted: set[str] = set()
        # Claims a consumer holds and may rely on (a crash of a renew or release makes it
        # unsure, and it is then left out).
        self.live: dict[str, ModelClaim] = {}
        # Each message's state in the life cycle's table, as last read.
        self.states: dict[str, lifecycle.State] = {}

    def _client(self, process: Process) -> SwiftClient:
        return memory_client(self.swift, process)

    def _start(self, process: Process) -> SwiftDriver:
        return SwiftDriver(self._client(process), namespace=self.namespace)

    def _run(self, index: int, call: object, *args: object, **kwargs: object) -> object:
        """``call`` on process ``index``'s driver; ``StorageUnavailable`` only from a crash."""
        try:
            return getattr(self.drivers[index], str(call))(P, Q, *args, **kwargs)
        except errors.StorageUnavailable:
            assert self.processes[index].crashed, "unavailable without a fault"
            seen(f"{call}: crashed")
            raise

    @initialize()
    def prepare(self) -> None:
        self.drivers[0].prepare()

    # -- faults and time -----------------------------------------------------------------------

    @rule(index=st.integers(0, 1), after=st.integers(0, 12), fault=st.sampled_from(Fault))
    def plan_fault(self, index: int, after: int, fault: Fault) -> None:
        self.processes[index].plan(after, fault)

    @rule(index=st.integers(0, 1))
    def restart(self, index: int) -> None:
        self.drivers[index].close()
        self.processes[index].restart()
        self.drivers[index] = self._start(self.processes[index])

    @rule(lag=st.integers(0, 6))
    def lag_listings(self, lag: int) -> None:
        self.swift.listing_lag = lag

    @rule(window=st.integers(0, 4))
    def race_creations(self, window: int) -> None:
        """Let a create-only write store over another process's creation made within
        ``window`` requests (its check came first), until that process's next request."""
        self.swift.creation_window = window

    @rule(ms=st.sampled_from((1, 999, 1_000, 5_000, 31_000, 61_000)))
    def advance(self, ms: int) -> None:
        self.now += ms
        self.live = {c: held for c, held in self.live.items() if held.expires_ms > self.now}

    # -- producers -----------------------------------------------------------------------------

    @rule(
        index=st.integers(0, 1), delays=st.lists(st.sampled_from(DELAYS_MS), min_size=1, max_size=3)
    )
    def post(self, index: int, delays: list[int]) -> None:
        batch = [NewMessage(json.dumps({"n": n}), TTL_S, delay) for n, delay in enumerate(delays)]
        try:
            posted = self._run(index, "post_messages", batch, "client", self.now)
        except errors.StorageUnavailable:
            self.unsure_posts += 1
            return
        for message_id, delay in zip(posted.ids, delays, strict=True):  # type: ignore[attr-defined]
            self.due[message_id] = self.earliest_due[message_id] = self.now + delay

    @rule(index=st.integers(0, 1), data=st.data(), delay=st.sampled_from(DELAYS_MS))
    def reschedule(self, index: int, data: st.DataObject, delay: int) -> None:
        if not self.due:
            return
        message_id = data.draw(st.sampled_from(sorted(self.due)))
        self._reschedule(index, message_id, None, delay)

    def _reschedule(self, index: int, message_id: str, claim_id: str | None, delay: int) -> None:
        try:
            edit = MessageEdit(message_id, claim_id, due_ms=self.now + delay)
            self._run(index, "edit_message", edit, self.now)
        except (errors.MessageIsClaimed, errors.MessageDoesNotExist):
            return
        except errors.StorageUnavailable:
            # Due at the old time or the new one: never early means before neither.
            self.earliest_due[message_id] = min(self.earliest_due[message_id], self.now + delay)
            self.due[message_id] = max(self.due[message_id], self.now + delay)
            return
        self.due[message_id] = self.earliest_due[message_id] = self.now + delay

    # -- consumers -----------------------------------------------------------------------------

    def _handed_out(self, messages: list[Message] | tuple[Message, ...]) -> set[str]:
        """Check messages a claim or pop handed out: due, not deleted, in no live claim."""
        ids = {m.id for m in messages}
        assert len(ids) == len(messages), "a message handed out twice at once"
        for message in messages:
            if message.id in self.earliest_due:
                assert self.earliest_due[message.id] <= self.now, f"{message.id} early"
            else:
                # Of a post that failed and was stored whole: known from now on.
                assert self.unsure_posts, f"{message.id} was never posted"
                self.due[message.id] = self.earliest_due[message.id] = message.due_ms
            assert message.due_ms <= self.now, f"{message.id} early by its own due time"
            assert message.id not in self.deleted, f"{message.id} deleted, then handed out"
            holders = [c for c, held in self.live.items() if message.id in held.messages]
            assert not holders, f"{message.id} is in live claim {holders}"
        return ids

    @rule(
        target=claims,
        index=st.integers(0, 1),
        limit=st.integers(1, 4),
        ttl_s=st.sampled_from(CLAIM_TTL_S),
    )
    def claim(self, index: int, limit: int, ttl_s: int) -> object:
        return self._took(self._claimed(index, limit, ttl_s), ttl_s)

    def _claimed(self, index: int, limit: int, ttl_s: int) -> Claim | None:
        """The claim process ``index`` made, if any (None: nothing claimed, or crashed)."""
        try:
            outcome = self._run(index, "claim", ClaimTimes(ttl_s, 60), limit, self.now)
        except errors.StorageUnavailable:
            return None
        claim: Claim | None = outcome.claim  # type: ignore[attr-defined]
        return claim

    def _took(self, claim: Claim | None, ttl_s: int) -> object:
        """Check and hold what ``claim`` handed out; its id for the claims bundle."""
        if claim is None:
            return multiple()
        held = self._handed_out(claim.messages)
        seen(f"claim: took {len(held)}")
        self.live[claim.id] = ModelClaim(self.now + ttl_s * 1000, held)
        return claim.id

    @rule(
        target=claims,
        change=st.sampled_from(CHANGES),
        data=st.data(),
        limit=st.integers(1, 4),
        ttl_s=st.sampled_from(CLAIM_TTL_S),
        runs=st.lists(st.tuples(st.sampled_from("ab"), st.integers(1, 24)), max_size=5),
    )
    def claim_beside(
        self,
        change: str,
        data: st.DataObject,
        limit: int,
        ttl_s: int,
        runs: list[tuple[str, int]],
    ) -> object:
        """Process b claims while process a makes ``change``, Swift answering their requests
        as ``runs`` says (so many requests of the process named, run after run), then one of
        each in turn: an order the test draws, the same on every replay. An entry b listed
        may go stale, and a slot b creates may be one a's change is writing, at any request.
        b's claim is held to the contract once both are done, and the change's outcome is
        known."""
        made = self._change_of(change, data)
        swift = self.swift
        assert isinstance(swift, TakingTurns)
        swift.take_turns([name for name, count in runs for _ in range(count)], then=["a", "b"])
        done = swift.at_once({"a": made, "b": lambda: self._claimed(1, limit, ttl_s)})
        seen(f"claim beside {change}")
        claimed = done["b"]
        assert claimed is None or isinstance(claimed, Claim)
        return self._took(claimed, ttl_s)

    def _change_of(self, change: str, data: st.DataObject) -> Callable[[], object]:
        """Process a's ``change`` as its rule makes it (with the rule's bookkeeping), on
        what ``data`` draws from the model now (a thread draws nothing)."""
        live = [c for c, held in self.live.items() if held.messages]  # made order (ids are random)
        if change in ("renew", "release", "delete") and not live:
            change = "claim"
        if change == "reschedule" and not self.due:
            change = "pop"
        if change == "claim":
            limit, ttl_s = data.draw(st.integers(1, 4)), data.draw(st.sampled_from(CLAIM_TTL_S))
            return lambda: self._took(self._claimed(0, limit, ttl_s), ttl_s)
        if change == "pop":
            limit = data.draw(st.integers(1, 3))
            return lambda: self.pop(0, limit)
        if change == "reschedule":
            message_id = data.draw(st.sampled_from(sorted(self.due)))
            delay = data.draw(st.sampled_from(DELAYS_MS))
            return lambda: self._reschedule(0, message_id, None, delay)
        claim_id = data.draw(st.sampled_from(live))
        if change == "renew":
            ttl_s = data.draw(st.sampled_from(CLAIM_TTL_S))
            return lambda: self.renew(0, claim_id, ttl_s)
        if change == "release":
            return lambda: self.release(0, claim_id)
        message_id = data.draw(st.sampled_from(sorted(self.live[claim_id].messages)))
        return lambda: self._delete(0, claim_id, message_id)

    @rule(index=st.integers(0, 1), claim_id=claims, data=st.data())
    def delete(self, index: int, claim_id: str, data: st.DataObject) -> None:
        held = self.live.get(claim_id)
        if held is None or not held.messages:
            return
        self._delete(index, claim_id, data.draw(st.sampled_from(sorted(held.messages))))

    def _delete(self, index: int, claim_id: str, message_id: str) -> None:
        held = self.live.get(claim_id)
        if held is None:
            return
        try:
            self._run(index, "delete_message", message_id, claim_id, self.now)
        except errors.StorageUnavailable:
            self.maybe_deleted.add(message_id)
            held.messages.discard(message_id)
            return
        held.messages.discard(message_id)
        self.deleted.add(message_id)

    @rule(
        index=st.integers(0, 1), claim_id=claims, data=st.data(), delay=st.sampled_from(DELAYS_MS)
    )
    def retry_later(self, index: int, claim_id: str, data: st.DataObject, delay: int) -> None:
        """A consumer's "retry later": a message its claim holds made due again later."""
        held = self.live.get(claim_id)
        if held is None or not held.messages:
            return
        message_id = data.draw(st.sampled_from(sorted(held.messages)))
        held.messages.discard(message_id)  # it leaves the claim, or may have
        self._reschedule(index, message_id, claim_id, delay)

    @rule(index=st.integers(0, 1), claim_id=consumes(claims))
    def release(self, index: int, claim_id: str) -> None:
        if claim_id not in self.live:
            return
        # Released, or unsure how much of it after a crash: no longer relied upon.
        del self.live[claim_id]
        with contextlib.suppress(errors.StorageUnavailable):
            self._run(index, "release_claim", claim_id, self.now)

    @rule(index=st.integers(0, 1), claim_id=claims, ttl_s=st.sampled_from(CLAIM_TTL_S))
    def renew(self, index: int, claim_id: str, ttl_s: int) -> None:
        held = self.live.get(claim_id)
        if held is None:
            return
        renewed_ms = self.now + ttl_s * 1000
        try:
            self._run(index, "renew_claim", claim_id, ttl_s, 60, self.now)
        except errors.StorageUnavailable:
            # Renewed or not, perhaps for some messages only: live until the earlier end.
            held.expires_ms = min(held.expires_ms, renewed_ms)
            return
        except errors.ClaimDoesNotExist:
            raise AssertionError(f"live claim {claim_id} not found") from None
        held.expires_ms = renewed_ms

    @rule(index=st.integers(0, 1), limit=st.integers(1, 3))
    def pop(self, index: int, limit: int) -> None:
        try:
            popped = self._run(index, "pop_messages", limit, self.now)
        except errors.StorageUnavailable:
            # A pop deletes what it takes before it answers: any message due may be gone.
            self.maybe_deleted |= {m for m, due in self.earliest_due.items() if due <= self.now}
            return
        self.deleted |= self._handed_out(popped)  # type: ignore[arg-type]

    # -- the end -------------------------------------------------------------------------------

    @invariant()
    def every_message_moves_along_the_table(self) -> None:
        """Each message whose post returned is, after every step, in a state of
        ``lifecycle``'s table reached through its transitions, never in no index; one the
        consumers did not delete is never gone."""
        for message_id in self.due:
            state = self._stored_state(message_id)
            if state is None:
                return  # not kept in memory: the machine runs on a real Swift
            assert state.found is not None, f"{message_id} is in no index: {state}"
            before = self.states.get(message_id, lifecycle.State.NAMED)
            assert state.found in lifecycle.reachable(before), f"{before} -> {state}"
            if message_id not in self.deleted | self.maybe_deleted:
                assert state.found is not lifecycle.State.GONE, f"{message_id} lost"
            if state.found is not before:
                seen(f"{before.value} -> {state.found.value}")
            self.states[message_id] = state.found

    def _stored_state(self, message_id: str) -> StoredState | None:
        """What the objects in memory say of the message."""
        ns, prefix = self.namespace, names.queue_prefix(P, Q)
        message = self.swift.current(f"{ns}_{names.MESSAGES}", prefix + message_id)
        index = f"{ns}_{names.INDEX}"
        entries = [n for n in self.swift.names(index, prefix) if n.endswith("/" + message_id)]
        claims = f"{ns}_{names.CLAIMS}"
        slots = self.swift.names(claims, f"{prefix}m/{message_id}/")
        latest = Slot()
        if slots:
            body = self.swift.current(claims, slots[-1])
            assert body is not None and body.body is not None
            latest = slot_from_document(int(slots[-1].rsplit("/", 1)[1]), body.body)
        found = lifecycle.state_of(
            exists=message is not None,
            named=message is not None and names.fields_of(message.content_type).get("i") == "1",
            due_entry=any(n.startswith(prefix + "d/") for n in entries),
            claimed_entry=any(n.startswith(prefix + "c/") for n in entries),
            latest=latest,
            now_ms=self.now,
        )
        return StoredState(found, tuple(entries), latest)

    def teardown(self) -> None:
        try:
            self._drain()
        finally:
            for driver in self.drivers:
                driver.close()

    def _drain(self) -> None:
        """Restart every process, let every claim, grace and lag run out, and drain the
        queue: each message whose post returned comes out exactly once, unless deleted."""
        self.swift.listing_lag = 0
        for index in range(len(self.processes)):
            self.restart(index)
        self.now += (
            max(CLAIM_TTL_S) * 1000
            + 60_000
            + ORPHAN_GRACE_MS
            + CLOCK_DISAGREEMENT_MS
            + TAKER_GRACE_MS
        )
        self.now = max([self.now, *self.due.values()]) + 1
        self.live.clear()
        drained: list[str] = []
        empty = 0
        for _ in range(DRAIN_ROUNDS):
            outcome = self.drivers[0].claim(P, Q, ClaimTimes(600, 0), 20, self.now)
            if outcome.claim is None:
                # A claim that repairs an index may find what it repaired only on the next.
                empty += 1
                if empty == DRAIN_EMPTY_CLAIMS:
                    break
                continue
            empty = 0
            messages = outcome.claim.messages
            self._handed_out(messages)
            drained += [m.id for m in messages]
            self.drivers[0].delete_messages(P, Q, Deletion([m.id for m in messages]), self.now)
        assert len(drained) == len(set(drained)), "drained twice"
        expected = set(self.due) - self.deleted - self.maybe_deleted
        assert expected <= set(drained), f"lost: {sorted(expected - set(drained))}"
        assert set(drained) - set(self.due) - self.maybe_deleted == set() or self.unsure_posts


@pytest.fixture(autouse=True)
def no_pause_between_known_reads(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In memory, a GET of an object that exists finds it (no overwrite races it into a
    404): a known read of a missing object, read again, is the same answer without the pause
    a real Swift needs between the reads (most of the machine's time, with every claim of its
    queue never created reading the queue's metadata). The reads themselves are still made."""
    if "three_replicas" not in request.fixturenames:
        monkeypatch.setattr(connect, "KNOWN_OBJECT_PAUSE_S", 0.0)


TestSwiftSlotMachine = SwiftSlotMachine.TestCase
TestSwiftSlotMachine.settings = settings(
    max_examples=1000,
    stateful_step_count=40,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


# 50 took 178-209 s of the gate; the in-memory machine above runs 1,000 of 40 steps.
THREE_REPLICA_EXAMPLES = 15


@pytest.mark.faults
@pytest.mark.xdist_group("swift-replicas")
def test_the_slot_machine_on_three_replicas(three_replicas: SwiftAllInOne) -> None:
    """The same machine on a real Swift keeping three copies: every request goes through
    swiftclient to the proxy, faults are injected on the connection (listings lag as the
    cluster makes them). Fewer examples than in memory: a cluster's requests cost the gate's
    two cores about 3 s an example, and the examples are drawn anew on every run
    (``database=None``, not derandomized), so the runs together go on covering more."""
    uri = three_replicas.store_uri

    class OnThreeReplicas(SwiftSlotMachine):
        def _client(self, process: Process) -> SwiftClient:
            # One request at a time, so no concurrent creation for a settle to wait out.
            return faulty_client(uri, process, settle_ms=0)

        # Not a rule here: with no settle wait two operations at once could both create one
        # slot, and a real cluster answers them in the scheduler's order, not the turns'.
        claim_beside = None  # type: ignore[assignment]

        def _stored_state(self, message_id: str) -> StoredState | None:
            return None  # the objects are on the cluster

    run_state_machine_as_test(
        OnThreeReplicas,
        settings=settings(
            max_examples=THREE_REPLICA_EXAMPLES,
            stateful_step_count=30,
            deadline=None,
            database=None,
            report_multiple_bugs=False,
            suppress_health_check=list(HealthCheck),
        ),
    )


# More requests than any one operation below makes: a sweep stops at the first crash point
# past the operation's last request.
CRASH_POINTS = 40


def crashed_at_every_point(setup: Any, operation: Any, fault: Fault) -> int:
    """Run ``setup(machine)``, then ``operation(machine)`` on process 1 with ``fault`` at
    its first request, then at its second, and so on until the operation ends before the
    fault; after each, check the table and drain the queue. Returns how many points."""
    for after in range(CRASH_POINTS):
        machine = SwiftSlotMachine()
        machine.prepare()
        setup(machine)
        machine.plan_fault(1, after, fault)
        operation(machine)
        met = machine.processes[1].planned is None
        machine.every_message_moves_along_the_table()
        machine.advance(61_000)
        machine.claim(0, 4, 30)  # claims moving entries back meet what the crash left
        machine.every_message_moves_along_the_table()
        machine.teardown()
        if not met:
            return after
    raise AssertionError(f"the operation made more than {CRASH_POINTS} requests")


def posted_and_claimed(machine: SwiftSlotMachine) -> None:
    machine.post(0, [0, 0])
    machine.advance(1)
    assert machine.claim(0, 2, 30) is not None
    assert {m for held in machine.live.values() for m in held.messages} == set(machine.due)


def only_claim(machine: SwiftSlotMachine) -> str:
    (claim_id,) = machine.live
    return claim_id


OPERATIONS = {
    "post": (lambda m: None, lambda m: m.post(1, [0, 1_000])),
    "claim": (lambda m: (m.post(0, [0, 0]), m.advance(1)), lambda m: m.claim(1, 2, 30)),
    "reschedule a named message": (
        lambda m: m.post(0, [1_000]),
        lambda m: m._reschedule(1, next(iter(m.due)), None, 0),
    ),
    "retry later": (
        posted_and_claimed,
        lambda m: m._reschedule(1, sorted(m.due)[0], only_claim(m), 0),
    ),
    "renew": (posted_and_claimed, lambda m: m.renew(1, only_claim(m), 120)),
    "release": (posted_and_claimed, lambda m: m.release(1, only_claim(m))),
    "delete": (posted_and_claimed, lambda m: delete_first(m)),
}


def delete_first(machine: SwiftSlotMachine) -> None:
    """Delete the first message under the claim holding it, on process 1."""
    message_id = sorted(machine.due)[0]
    machine.live[only_claim(machine)].messages.discard(message_id)
    try:
        machine._run(1, "delete_message", message_id, only_claim(machine), machine.now)
    except errors.StorageUnavailable:
        machine.maybe_deleted.add(message_id)
        return
    machine.deleted.add(message_id)


@pytest.mark.parametrize("fault", [Fault.LOST, Fault.UNANSWERED, Fault.OVERTAKEN])
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_an_operation_stopped_at_any_request_leaves_every_message_in_the_table(
    operation: str, fault: Fault
) -> None:
    """Every crash point of each operation, one by one: what it leaves is a state of the
    table, and draining the queue loses nothing acknowledged."""
    setup, run = OPERATIONS[operation]
    points = crashed_at_every_point(setup, run, fault)
    assert points > 0
