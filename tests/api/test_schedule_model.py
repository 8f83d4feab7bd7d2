"""Recurring schedules held to their promises by a hypothesis state machine, with faults.

Three schedules fire every minute into one queue from one ``start_at``: ``s0`` with ``misfire:
skip``, ``s1`` with ``all``, and ``s2`` with ``skip`` and messages delayed 30 s, while a fake clock moves by steps from a millisecond to five
minutes (outages) and the push dispatcher runs now and then. Faults come between the steps:

- a tick fired again, at any later time (its dispatcher died before settling it, or its lease
  ended while a slow fire still ran);
- a slow store: the clock moves while the fire reads its schedules and while each post is
  stored;
- a fire whose store call fails: its messages' post (nothing stored, or stored with its answer
  lost), or a call after they were posted (its state, or its next tick, not written): the
  tick is retried;
- the schedule written again unchanged (a deploy script);
- the schedule deleted and written again under its name (the dispatcher running in between or
  not), on a grid of its own: its first slot within the next minute, whole seconds apart from
  every earlier schedule's, so that each fire tells which of them made it.

After every step, from what the queue holds and what the journal says:

- every message was reported once as stored (one ``scheduled`` event), or by repeats only (a
  retry's, after its post's answer was lost), or not yet (that retry has not come); every
  report is a message, and a repeat names the slot of the message's first report;
- no message is due before its slot plus its delay, and each is due when its report says;
- no slot fired twice, and each slot is one of a schedule of that name, fired before that
  schedule was deleted;
- ``all`` fired its slots in order, none left out; ``skip`` put at most one message in each
  minute of the plan (a catch-up never comes with the next slot's message beside it), the
  minutes counted from the first slot plus the delay: each for every schedule of a name.

A ``settle`` step runs the dispatcher with no fault for two minutes: every schedule must have
caught up with the clock, show no failure (``last_error``) any more, count as ``fires`` the
messages it posted (those of a deleted schedule of its name not among them), and have one tick stored
(a deleted schedule's tick fired nothing, and a schedule written again runs one chain).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import pathlib
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.helpers.api import PROJECT, Api, api_on
from tests.helpers.push import dispatching, senders
from zaqar_delay.api import views
from zaqar_delay.conf import JournalSettings
from zaqar_delay.schedules import names
from zaqar_delay.schedules.firing import LEAD_MS

EVERY_MS = 60_000
# Each schedule's misfire and its messages' delay (s).
SCHEDULES = {"s0": ("skip", 0), "s1": ("all", 0), "s2": ("skip", 30)}
TTL_S = 1_209_600  # the longest: no message expires during a run
STEPS_MS = (1, 499, 1_000, LEAD_MS, 30_000, EVERY_MS - LEAD_MS, EVERY_MS, 61_000, 5 * EVERY_MS)
EXAMPLES = {"embedded": 60, "mongodb": 30}
STEPS = 30


class Written:
    """The schedules written under one name, in order: each one's first slot and, once it
    was deleted, when."""

    def __init__(self, first_slot: int) -> None:
        self.first_slots = [first_slot]
        self.deleted_at: list[int] = []

    @property
    def first_slot(self) -> int:
        return self.first_slots[-1]

    def of(self, fire: dict[str, Any]) -> int:
        """Which schedule made ``fire``: the one whose grid holds its slot (each has its own)."""
        for at, first in enumerate(self.first_slots):
            if fire["slot"] >= first and (fire["slot"] - first) % EVERY_MS == 0:
                return at
        raise AssertionError(f"{fire} is on no schedule's grid: {self.first_slots}")


class ScheduleMachine(RuleBasedStateMachine):
    """The schedules of one queue under faults (the class attribute ``open_api`` opens a
    fresh API with a journal in the given directory)."""

    open_api: Callable[[str], Iterator[Api]]

    def __init__(self) -> None:
        super().__init__()
        self._journal = tempfile.TemporaryDirectory(prefix="zd-schedule-model-")
        self._apis = self.open_api(self._journal.name)
        self.api = next(self._apis)
        self.ticks: list[Any] = []  # every tick body a dispatcher fired, in order
        self.store_lag_ms = 0
        self.fail_next: str | None = None
        self.answers_lost: set[str] = set()  # messages stored by posts answered with an error
        first_slot = self.api.clock.now_ms() + EVERY_MS
        self.written = {name: Written(first_slot) for name in SCHEDULES}
        self.rewrites = 0
        for name in SCHEDULES:
            answer = self.api.put(f"/v2/queues/q/schedules/{name}", json=self._document(name))
            assert answer.status_code == 201, answer.text
        self._faults()
        fire_many = self.api.service.schedules.fire_many

        def recording(project: str, queue: str, bodies: Sequence[Any], now_ms: int) -> Any:
            self.ticks += bodies
            return fire_many(project, queue, bodies, now_ms)

        self._dispatching = dispatching(self.api, senders(fire=recording))
        self.dispatcher = self._dispatching.__enter__()

    def _document(self, name: str) -> dict[str, Any]:
        misfire, delay_s = SCHEDULES[name]
        return {
            "every": EVERY_MS // 1000,
            "start_at": views.timestamp_ms(self.written[name].first_slot),
            "misfire": misfire,
            "message": {"body": {"schedule": name}, "ttl": TTL_S, "delay": delay_s},
        }

    def _faults(self) -> None:
        """A fire's read of its schedules and each of its posts taking ``store_lag_ms``, and
        one store call that fails when ``fail_next`` names it."""
        ticks = self.api.service.schedules.ticks
        post, records = ticks._post, ticks.records
        read = records.definitions_and_states
        write_states, post_ticks = records.write_states, records.post_ticks

        def lagging_read(*args: Any) -> Any:
            self.api.clock.advance(ms=self.store_lag_ms)
            return read(*args)

        def lagging_post(*args: Any) -> Any:
            if self.fail_next == "post":  # the store away: nothing is stored
                self.fail_next = None
                raise ConnectionError("the store refused post")
            if self.fail_next == "post_answer":  # stored, and answered with an error
                self.fail_next = None
                self.answers_lost.update(post(*args).ids)
                raise ConnectionError("the answer to post was lost")
            posted = post(*args)  # arrives at once, and is answered late
            self.api.clock.advance(ms=self.store_lag_ms)
            return posted

        def failing(name: str, call: Callable[..., None]) -> Callable[..., None]:
            def fail_once(*args: Any) -> None:
                if self.fail_next == name:
                    self.fail_next = None
                    raise ConnectionError(f"the store refused {name}")
                call(*args)

            return fail_once

        ticks._post = lagging_post  # type: ignore[method-assign]
        records.definitions_and_states = lagging_read  # type: ignore[method-assign]
        records.write_states = failing("write_states", write_states)  # type: ignore[method-assign]
        records.post_ticks = failing("post_ticks", post_ticks)  # type: ignore[method-assign]

    # -- steps -------------------------------------------------------------------------------

    @rule(step_ms=st.sampled_from(STEPS_MS))
    def advance(self, step_ms: int) -> None:
        self.api.clock.advance(ms=step_ms)

    @rule()
    def dispatch(self) -> None:
        self.dispatcher.run_once()

    @rule(lag_ms=st.sampled_from((5, 1_500, 30_000)))
    def dispatch_on_a_slow_store(self, lag_ms: int) -> None:
        self.store_lag_ms = lag_ms
        try:
            self.dispatcher.run_once()
        finally:
            self.store_lag_ms = 0

    @rule(call=st.sampled_from(("post", "post_answer", "write_states", "post_ticks")))
    def dispatch_with_a_store_call_failing(self, call: str) -> None:
        self.fail_next = call
        try:
            self.dispatcher.run_once()
        finally:
            self.fail_next = None

    @precondition(lambda self: bool(self.ticks))
    @rule(data=st.data())
    def fire_a_tick_again(self, data: st.DataObject) -> None:
        body = data.draw(st.sampled_from(self.ticks[-6:]))
        queue = names.tick_queue("q")
        self.api.service.schedules.fire_many(PROJECT, queue, [body], self.api.clock.now_ms())

    @rule(name=st.sampled_from(sorted(SCHEDULES)))
    def write_again_unchanged(self, name: str) -> None:
        answer = self.api.put(f"/v2/queues/q/schedules/{name}", json=self._document(name))
        assert answer.status_code == 204, answer.text

    @rule(name=st.sampled_from(sorted(SCHEDULES)), dispatch_between=st.booleans())
    def delete_and_write_again(self, name: str, dispatch_between: bool) -> None:
        """The schedule deleted (its next tick stays in the tick queue, to fire nothing) and
        written again, its first slot on a grid whole seconds off every earlier one's."""
        assert self.api.delete(f"/v2/queues/q/schedules/{name}").status_code == 204
        written = self.written[name]
        written.deleted_at.append(self.api.clock.now_ms())
        if dispatch_between:
            self.dispatcher.run_once()
        self.rewrites += 1
        first = self.written["s0"].first_slots[0] + self.rewrites * 1_000
        now = self.api.clock.now_ms()
        written.first_slots.append(first + -(-(now + 1_000 - first) // EVERY_MS) * EVERY_MS)
        answer = self.api.put(f"/v2/queues/q/schedules/{name}", json=self._document(name))
        assert answer.status_code == 201, answer.text

    @rule()
    def settle(self) -> None:
        """Two minutes of a dispatcher with no fault: both schedules catch up."""
        for _ in range(40):
            self.api.clock.advance(ms=3_000)
            self.dispatcher.run_once()
        now = self.api.clock.now_ms()
        for name, by_schedule in self._fires_by_schedule().items():
            first = self.written[name].first_slot
            latest = first + (now - first) // EVERY_MS * EVERY_MS
            slots = sorted(fire["slot"] for fire in by_schedule[-1])
            assert slots and slots[-1] >= latest, (name, latest, slots)
            # A fire that failed before is no longer shown, and the count is this schedule's.
            shown = self.api.get(f"/v2/queues/q/schedules/{name}").json
            assert shown["last_error"] is None, (name, shown["last_error"])
            assert shown["fires"] == len(slots), (name, shown["fires"], slots)
        ticks = names.tick_queue("q")
        stored = self.api.store(ticks).stats(PROJECT, ticks, now).total
        assert stored == len(SCHEDULES), stored

    # -- what must hold ----------------------------------------------------------------------

    @invariant()
    def each_message_is_reported_once_due_at_its_slot_or_later(self) -> None:
        listed = self._messages()
        lines = [line for named in self._lines().values() for line in named]
        stored_lines = [line for line in lines if not line.get("repeat")]
        stored = {line["message_id"]: line for line in stored_lines}
        assert len(stored) == len(stored_lines), stored_lines  # one stored line per message
        reported = {line["message_id"] for line in lines}
        assert reported <= set(listed), (reported, listed)
        assert set(listed) - reported <= self.answers_lost, (reported, listed)
        for message_id, fire in stored.items():
            delay_ms = SCHEDULES[fire["schedule"]][1] * 1000
            assert listed[message_id] == fire["due"] >= fire["slot"] + delay_ms, fire
            assert fire["delay"] == delay_ms, fire
        for repeat in (line for line in lines if line.get("repeat")):
            first = stored.get(repeat["message_id"], repeat)
            assert (repeat["slot"], repeat["delay"]) == (first["slot"], first["delay"]), repeat
            assert listed[repeat["message_id"]] >= repeat["slot"] + repeat["delay"], repeat

    @invariant()
    def slots_fire_once_all_in_order_and_skip_one_a_minute(self) -> None:
        for name, by_schedule in self._fires_by_schedule().items():
            written = self.written[name]
            for at, fires in enumerate(by_schedule):
                self._check_fires(name, fires, written.first_slots[at])
                if at < len(written.deleted_at):
                    late = [fire for fire in fires if fire["ts"] > written.deleted_at[at]]
                    assert not late, (name, written.deleted_at[at], late)

    @staticmethod
    def _check_fires(name: str, fires: list[dict[str, Any]], first_slot: int) -> None:
        """The fires of one schedule of ``name`` whose first slot is ``first_slot``."""
        slots = sorted(fire["slot"] for fire in fires)
        assert len(slots) == len(set(slots)), (name, slots)
        misfire, delay_s = SCHEDULES[name]
        if misfire == "all":
            ending = first_slot + len(slots) * EVERY_MS
            assert slots == list(range(first_slot, ending, EVERY_MS)), (name, slots)
        else:
            start = first_slot + delay_s * 1000
            minutes = [(fire["due"] - start) // EVERY_MS for fire in fires]
            assert len(minutes) == len(set(minutes)), (name, sorted(minutes))

    def teardown(self) -> None:
        self._dispatching.__exit__(None, None, None)
        with contextlib.suppress(StopIteration):
            next(self._apis)
        self._journal.cleanup()

    # -- reading -----------------------------------------------------------------------------

    def _messages(self) -> dict[str, int]:
        """Every message of the queue, delayed or not: its due time by id."""
        found: dict[str, int] = {}
        query = "echo=true&include_delayed=true&with_schedule=true&limit=20"
        while True:
            listed = self.api.get("/v2/queues/q/messages", query_string=query)
            page = listed.json["messages"] if listed.status_code == 200 else []
            for message in page:
                found[message["id"]] = _epoch_ms(message["due"])
            if len(page) < 20:
                return found
            query = listed.json["links"][0]["href"].split("?", 1)[1]

    def _fires_by_schedule(self) -> dict[str, list[list[dict[str, Any]]]]:
        """The journal's ``scheduled`` events, by name, then by schedule of that name."""
        by_name: dict[str, list[list[dict[str, Any]]]] = {}
        for name, fires in self._fires().items():
            written = self.written[name]
            by_name[name] = [[] for _ in written.first_slots]
            for fire in fires:
                by_name[name][written.of(fire)].append(fire)
        return by_name

    def _fires(self) -> dict[str, list[dict[str, Any]]]:
        """Each message's ``scheduled`` event, by schedule, as the Spark report counts them:
        the one written when it was stored, else its first repeat, due when the queue says."""
        listed: dict[str, int] = {}
        fires: dict[str, list[dict[str, Any]]] = {}
        for name, lines in self._lines().items():
            ids = {line["message_id"] for line in lines if not line.get("repeat")}
            fires[name] = [line for line in lines if not line.get("repeat")]
            for line in lines:
                if line.get("repeat") and line["message_id"] not in ids:
                    ids.add(line["message_id"])
                    listed = listed or self._messages()
                    fires[name].append(line | {"due": listed[line["message_id"]]})
        return fires

    def _lines(self) -> dict[str, list[dict[str, Any]]]:
        """The journal's ``scheduled`` events, by schedule."""
        lines: dict[str, list[dict[str, Any]]] = {name: [] for name in SCHEDULES}
        for path in sorted(pathlib.Path(self._journal.name).glob("*.jsonl")):
            for line in path.read_text().splitlines():
                event = json.loads(line)
                if event["event"] == "scheduled":
                    lines[event["schedule"]].append(event)
        return lines


def _epoch_ms(text: str) -> int:
    return int(datetime.datetime.fromisoformat(text).timestamp() * 1000)


@pytest.mark.parametrize(
    "store", ["embedded", pytest.param("mongodb", marks=pytest.mark.other_store)]
)
def test_schedules_keep_their_promises_under_faults(
    request: pytest.FixtureRequest, store: str
) -> None:
    def open_api(journal: str) -> Iterator[Api]:
        return api_on(request, store, journal=JournalSettings(path=journal))

    machine = type("Machine", (ScheduleMachine,), {"open_api": staticmethod(open_api)})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=EXAMPLES[store],
            stateful_step_count=STEPS,
            deadline=None,
            derandomize=True,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
