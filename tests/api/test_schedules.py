"""Recurring schedules over HTTP on every store, fired by the push dispatcher on the fake
clock: each slot's message posted once and due at its slot, never before; written again,
paused, run now, caught up after an outage; refused with a 400 when the plan cannot be."""

from __future__ import annotations

import datetime
import json
import pathlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testbed.receiver import receiver
from tests.helpers.api import PROJECT, Api, api_on, assert_error, store_post_size_limit
from tests.helpers.push import dispatching, senders
from zaqar_delay.api import views
from zaqar_delay.conf import JournalSettings, Limits
from zaqar_delay.push.dispatcher import LEASE_AHEAD_MS, Dispatcher
from zaqar_delay.push.tick_batches import TICK_LEASE_MS
from zaqar_delay.schedules import names
from zaqar_delay.schedules.document import post_size
from zaqar_delay.schedules.firing import EARLY_MS, LEAD_MS, TICK_DEDUP_S, fire_post_size
from zaqar_delay.schedules.names import TICK_RETRIES

JSON_PATCH = {"Content-Type": "application/openstack-messaging-v2.0-json-patch"}
EVERY_MINUTE = {"every": 60, "message": {"body": {"job": "sweep"}, "ttl": 600}}


def iso(ms: int) -> str:
    return views.timestamp_ms(ms)


def epoch_ms(text: str) -> int:
    return int(datetime.datetime.fromisoformat(text).timestamp() * 1000)


def claim(api: Api, queue: str = "q") -> list[dict[str, Any]]:
    answer = api.post(f"/v2/queues/{queue}/claims", json={"ttl": 60, "grace": 60})
    return [] if answer.status_code == 204 else list(answer.json["messages"])


def messages(api: Api, queue: str = "q", limit: int = 20) -> list[Any]:
    """The bodies of the queue's messages, delayed ones included (pages of 20)."""
    bodies: list[Any] = []
    query = "echo=true&include_delayed=true&limit=20"
    while len(bodies) < limit:
        listed = api.get(f"/v2/queues/{queue}/messages", query_string=query)
        page = [m["body"] for m in listed.json["messages"]]
        bodies += page
        if not page:
            break
        query = listed.json["links"][0]["href"].split("?", 1)[1]
    return bodies[:limit]


def test_put_then_get_shows_the_plan_and_its_next_slots(api: Api) -> None:
    written = api.clock.now_ms()
    created = api.put("/v2/queues/q/schedules/sweep", json=EVERY_MINUTE)
    assert created.status_code == 201, created.text
    assert created.headers["location"] == "/v2/queues/q/schedules/sweep"
    shown = api.get("/v2/queues/q/schedules/sweep").json
    assert shown == {
        "every": 60,
        "timezone": "UTC",
        "misfire": "skip",
        "paused": False,
        "message": {"body": {"job": "sweep"}, "ttl": 600},
        "name": "sweep",
        "href": "/v2/queues/q/schedules/sweep",
        "next": [iso(written + k * 60_000) for k in range(1, 6)],
        "last_fire": None,
        "fires": 0,
        "last_error": None,
    }
    # Written again unchanged: nothing changes (a deploy script may write it every time).
    assert api.put("/v2/queues/q/schedules/sweep", json=EVERY_MINUTE).status_code == 204
    assert api.get("/v2/queues/q/schedules/sweep").json["next"] == shown["next"]


def test_each_slot_posts_one_message_due_at_the_slot_never_before(api: Api) -> None:
    written = api.clock.now_ms()
    api.put("/v2/queues/q/schedules/sweep", json=EVERY_MINUTE)
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=60_000 - LEAD_MS - 1)
        assert dispatcher.run_once() == 0  # the tick is due LEAD_MS before the slot
        api.clock.advance(ms=1)
        assert dispatcher.run_once() == 1
        assert messages(api) == [{"job": "sweep"}]  # posted ahead of its slot...
        assert claim(api) == []  # ...and not claimable before it
        api.clock.advance(ms=LEAD_MS - 1)
        assert claim(api) == []
        api.clock.advance(ms=1)
        [fired] = claim(api)
        assert fired["body"] == {"job": "sweep"}
        shown = api.get("/v2/queues/q/schedules/sweep").json
        assert shown["fires"] == 1
        assert shown["last_fire"]["slot"] == iso(written + 60_000)
        assert shown["last_fire"]["message_id"] == fired["id"]
        assert shown["next"][0] == iso(written + 120_000)
        assert api.delete(fired["href"]).status_code == 204
        for _ in range(3):
            assert dispatcher.run_once() == 0  # nothing more before the next tick
        api.clock.advance(ms=60_000 - LEAD_MS)
        assert dispatcher.run_once() == 1
        api.clock.advance(ms=LEAD_MS)
        assert len(claim(api)) == 1
        assert api.get("/v2/queues/q/stats").json["messages"]["total"] == 1


def test_a_fire_repeated_after_a_crash_posts_once(api: Api) -> None:
    api.put("/v2/queues/q/schedules/sweep", json=EVERY_MINUTE)
    definition = names.definition_queue("q", "sweep")
    metadata = api.service.stores.for_queue(PROJECT, definition).get_metadata(PROJECT, definition)
    assert metadata is not None
    slot = api.clock.now_ms() + 60_000
    body = {"schedule": "sweep", "generation": metadata["generation"], "slot": slot}
    api.clock.advance(ms=59_000)
    for _ in range(3):  # the same tick, fired again (a dispatcher died before settling it)
        api.service.schedules.fire(PROJECT, names.tick_queue("q"), body, api.clock.now_ms())
        api.clock.advance(ms=60_000)  # later each time: it would count missed slots
    assert messages(api) == [{"job": "sweep"}]
    assert api.get("/v2/queues/q/schedules/sweep").json["fires"] == 1
    # Counted once, as the one message: the repeats stored nothing.
    counted = api.service.metrics.render().decode()
    labels = f'project="{PROJECT}",queue="q",schedule="sweep"'
    assert f'zaqar_delay_schedule_fires_total{{late="false",{labels}}} 1.0' in counted
    assert 'zaqar_delay_schedule_fires_total{late="true"' not in counted
    assert "zaqar_delay_schedule_missed_slots_total{" not in counted


@pytest.fixture(params=["embedded", pytest.param("mongodb", marks=pytest.mark.other_store)])
def quick_api(request: pytest.FixtureRequest) -> Iterator[Api]:
    """The API on the stores where writing tens of schedules takes well under a second (the
    batch path is the same on every store; the contract suite holds each store's bulk read
    to the same answers)."""
    yield from api_on(request, request.param)


def test_ticks_due_together_fire_together_and_a_refused_message_holds_back_no_other(
    quick_api: Api,
) -> None:
    """31 ticks due at once are leased and fired in one batch, in one of the dispatcher's 4
    request slots; the one schedule whose message the queue now refuses fails alone, is
    retried, and fires once the queue takes it again."""
    api = quick_api
    assert api.put("/v2/queues/q").status_code == 201
    for n in range(30):
        one = {"every": 60, "message": {"body": {"n": n}, "ttl": 600}}
        assert api.put(f"/v2/queues/q/schedules/s{n}", json=one).status_code == 201
    big = {"every": 60, "message": {"body": {"pad": "x" * 2000}, "ttl": 600}}
    assert api.put("/v2/queues/q/schedules/big", json=big).status_code == 201
    # Below the big message, and below 20 small ones posted together (stored: the API now
    # refuses a limit one of the queue's schedules cannot live with).
    store_post_size_limit(api, "q", 1000)
    with dispatching(api) as dispatcher:
        assert dispatcher.concurrency == 4
        api.clock.advance(ms=60_000 - LEAD_MS)
        assert dispatcher.run_once() == 31
        posted = messages(api, limit=40)
        assert sorted(body["n"] for body in posted) == list(range(30))
        assert api.get("/v2/queues/q/schedules/s7").json["fires"] == 1
        assert api.get("/v2/queues/q/schedules/big").json["fires"] == 0
        store_post_size_limit(api, "q", None)
        assert dispatcher.run_once() == 1  # the big one's tick, retried at once
        assert api.get("/v2/queues/q/schedules/big").json["fires"] == 1
        assert len(messages(api, limit=40)) == 31
        api.clock.advance(ms=LEAD_MS)
        assert len(claim(api)) == 10  # due at the slot (a claim takes 10 by default)


def push_attempts(api: Api) -> dict[str, float]:
    """The push attempts this server process settled, by outcome."""
    text = api.service.metrics.render().decode()
    return {
        sample.labels["outcome"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "zaqar_delay_push_attempts_total"
    }


def test_a_schedule_whose_fires_fail_for_hours_fires_once_they_succeed_again(
    quick_api: Api,
) -> None:
    """The queue refuses the schedule's message (its size limit lowered) for over two hours:
    the tick is retried, at most 30 s apart, and never given up (it was after about 50
    minutes, and the schedule then never fired again), so once the limit is lifted the
    latest slot missed fires and the plan goes on. Here the tick queue holds the retry policy
    an earlier release stored in tick queues, which gave up: ticks are retried by the
    server's policy, whatever their queue holds."""
    api = quick_api
    assert api.put("/v2/queues/q").status_code == 201
    big = {"every": 60, "message": {"body": {"pad": "x" * 2000}, "ttl": 600}}
    assert api.put("/v2/queues/q/schedules/big", json=big).status_code == 201
    ticks = names.tick_queue("q")
    made = api.store(ticks).get_metadata(PROJECT, ticks)
    assert made is not None
    earlier = {**TICK_RETRIES, "maximum_delay_retries": 100}
    api.store(ticks).set_metadata(PROJECT, ticks, {**made, "_retry_policy": earlier})
    store_post_size_limit(api, "q", 1000)
    with dispatching(api) as dispatcher:
        for _ in range(130):
            api.clock.advance(ms=60_000)
            dispatcher.run_once()
        # The fault: every fire for two hours was refused, and the tick retried each time.
        assert api.get("/v2/queues/q/schedules/big").json["fires"] == 0
        attempts = push_attempts(api)
        assert attempts["retry"] >= 130 and attempts.get("failed", 0) == 0
        stored = api.store(ticks).get_metadata(PROJECT, ticks)
        assert stored is not None and stored["_retry_policy"] == earlier
        store_post_size_limit(api, "q", None)
        api.clock.advance(ms=30_000)
        dispatcher.run_once()
        assert api.get("/v2/queues/q/schedules/big").json["fires"] == 1
        api.clock.advance(ms=60_000)
        dispatcher.run_once()
        assert api.get("/v2/queues/q/schedules/big").json["fires"] == 2


def test_a_tick_whose_fire_hangs_fires_again_after_its_short_lease_and_posts_once(
    api: Api,
) -> None:
    """A dispatcher whose fire hangs (a process stuck, or dead) holds its ticks only
    ``TICK_LEASE_MS``, not three push timeouts: another fires them then; when the first
    one's fire ends after all, nothing is posted twice."""
    api.put("/v2/queues/q/schedules/sweep", json=EVERY_MINUTE)
    released = threading.Event()

    def hanging(*fire: Any) -> list[Exception | None]:
        released.wait(30)
        return api.service.schedules.fire_many(*fire)

    stuck = Dispatcher(api.service, senders(fire=hanging), concurrency=4)
    try:
        with dispatching(api) as dispatcher:
            assert stuck.lease_ms > TICK_LEASE_MS
            api.clock.advance(ms=60_000 - LEAD_MS)
            [hung] = stuck._lease_round(ahead=False)
            api.clock.advance(ms=TICK_LEASE_MS - 1)
            assert dispatcher.run_once() == 0  # still leased
            api.clock.advance(ms=1)
            assert dispatcher.run_once() == 1
            assert messages(api) == [{"job": "sweep"}]
            released.set()
            hung.result(timeout=30)
            stuck.run_once()
            assert messages(api) == [{"job": "sweep"}]
            assert api.get("/v2/queues/q/schedules/sweep").json["fires"] == 1
            api.clock.advance(ms=60_000)
            assert dispatcher.run_once() == 1  # the chain goes on, once
            assert len(messages(api)) == 2
    finally:
        released.set()
        stuck.stop()


def test_a_tick_batch_fired_slowly_halves_the_next_and_quick_full_ones_double_it_back(
    quick_api: Api,
) -> None:
    """A batch of ticks whose fire takes more than half its lease halves the next batch of
    its tick queue, so that a fire ends before another dispatcher may lease its ticks; the
    ticks left over fire in the next rounds. Full batches fired quickly double it again."""
    api = quick_api
    for n in range(8):
        one = {"every": 60, "message": {"body": {"n": n}, "ttl": 600}}
        assert api.put(f"/v2/queues/q/schedules/s{n}", json=one).status_code == 201
    batches: list[int] = []
    slow = threading.Event()
    slow.set()

    def timed(project: str, queue: str, bodies: Any, now_ms: int) -> list[Exception | None]:
        batches.append(len(bodies))
        fired = api.service.schedules.fire_many(project, queue, bodies, now_ms)
        if slow.is_set():
            api.clock.advance(ms=TICK_LEASE_MS // 2 + 1)
        return fired

    slow_fire_ms = TICK_LEASE_MS // 2 + 1
    with dispatching(api, senders(fire=timed)) as dispatcher:
        api.clock.advance(ms=60_000 - LEAD_MS)
        assert dispatcher.run_once() == 8  # slow: the next batch is 4
        api.clock.advance(ms=60_000 - slow_fire_ms)
        assert dispatcher.run_once() == 4  # slow again: 2
        slow.clear()
        # Quick from now on: a full batch doubles the next, the rest of the ticks does not.
        assert [dispatcher.run_once() for _ in range(3)] == [2, 2, 0]  # 4 next
        api.clock.advance(ms=60_000 - slow_fire_ms)
        assert [dispatcher.run_once() for _ in range(3)] == [4, 4, 0]  # 8 next
        api.clock.advance(ms=60_000)
        assert [dispatcher.run_once() for _ in range(2)] == [8, 0]
    assert batches == [8, 4, 2, 2, 4, 4, 8]
    for n in range(8):  # every slot fired once
        assert api.get(f"/v2/queues/q/schedules/s{n}").json["fires"] == 4


def test_a_schedule_written_again_leaves_the_old_plan_s_tick_without_effect(api: Api) -> None:
    api.put("/v2/queues/q/schedules/sweep", json=EVERY_MINUTE)
    hourly = {**EVERY_MINUTE, "every": 3600}
    assert api.put("/v2/queues/q/schedules/sweep", json=hourly).status_code == 204
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=60_000)
        dispatcher.run_once()  # the minute plan's tick: stale
        api.clock.advance(ms=60_000)
        dispatcher.run_once()
        assert messages(api) == []
        api.clock.advance(ms=3600_000 - 120_000)
        assert dispatcher.run_once() == 1
        assert messages(api) == [{"job": "sweep"}]


def test_paused_fires_nothing_and_resumed_fires_from_now(api: Api) -> None:
    api.put("/v2/queues/q/schedules/sweep", json=EVERY_MINUTE)
    paused = api.patch("/v2/queues/q/schedules/sweep", json={"paused": True})
    assert paused.status_code == 204, paused.text
    assert api.get("/v2/queues/q/schedules/sweep").json["next"] == []
    with dispatching(api) as dispatcher:
        for _ in range(3):
            api.clock.advance(ms=60_000)
            dispatcher.run_once()
        assert messages(api) == []
        resumed_at = api.clock.now_ms()
        assert api.patch("/v2/queues/q/schedules/sweep", json={"paused": False}).status_code == 204
        upcoming = api.get("/v2/queues/q/schedules/sweep").json["next"]
        assert epoch_ms(upcoming[0]) > resumed_at
        api.clock.advance(ms=60_000)
        dispatcher.run_once()
        assert messages(api) == [{"job": "sweep"}]


@pytest.mark.parametrize(("misfire", "fired"), [("skip", 1), ("all", 10)])
def test_slots_missed_in_an_outage_fire_by_the_misfire_policy(
    api: Api, misfire: str, fired: int
) -> None:
    api.put("/v2/queues/q/schedules/sweep", json={**EVERY_MINUTE, "misfire": misfire})
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=10 * 60_000 + 500)  # no server ran for ten slots
        dispatcher.run_once()
        assert len(messages(api)) == fired
        assert api.get("/v2/queues/q/schedules/sweep").json["fires"] == fired
        api.clock.advance(ms=60_000)
        dispatcher.run_once()
        assert len(messages(api)) == fired + 1  # and on by the plan


def tick_count(api: Api, queue: str = "q") -> int:
    """How many ticks the schedules of ``queue`` have stored."""
    ticks = names.tick_queue(queue)
    return api.store(ticks).stats(PROJECT, ticks, api.clock.now_ms()).total


@pytest.mark.parametrize("misfire", ["skip", "all"])
@pytest.mark.parametrize(("every_s", "outage_s"), [(60, 30 * 86_400), (3600, 10 * 366 * 86_400)])
def test_a_schedule_outlives_an_outage_of_any_length(
    api: Api, misfire: str, every_s: int, outage_s: int
) -> None:
    """No server ran for 30 days (an every-minute plan) or 10 years (an hourly one): the tick
    due at the first missed slot is still stored (it was kept an hour past its time, and the
    schedule then fired nothing ever again), so the slots missed fire by the misfire policy
    (``all``: the latest 100) and the plan goes on."""
    plan = {"every": every_s, "misfire": misfire, "message": {"body": 1, "ttl": 600}}
    api.put("/v2/queues/q/schedules/sweep", json=plan)
    fired = 1 if misfire == "skip" else 100
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=every_s * 1000)
        assert dispatcher.run_once() == 1
        api.clock.advance(ms=outage_s * 1000)  # no server ran
        # The outage: the tick of the slot after the first fire is still to fire, long after.
        ticks = names.tick_queue("q")
        stored = api.store(ticks).stats(PROJECT, ticks, api.clock.now_ms())
        assert stored.total == 1 and stored.oldest is not None
        assert api.clock.now_ms() - stored.oldest.created_ms >= outage_s * 1000
        dispatcher.run_once()
        assert api.get("/v2/queues/q/schedules/sweep").json["fires"] == 1 + fired
        api.clock.advance(ms=every_s * 1000)
        dispatcher.run_once()
        assert api.get("/v2/queues/q/schedules/sweep").json["fires"] == 2 + fired


def test_a_tick_fired_again_after_its_successor_s_id_was_forgotten_forks_no_second_chain(
    api: Api,
) -> None:
    """A tick's dedup id is remembered an hour (``TICK_DEDUP_S``), while the tick lives until
    it fires. The first slot's tick fired again two hours later (its dispatcher died before
    settling it, and no server ran since) posts a second tick for the next slot: the two fire
    together, their successors are one tick, and each later slot posts one message."""
    api.put("/v2/queues/q/schedules/sweep", json=EVERY_MINUTE)
    definition = names.definition_queue("q", "sweep")
    metadata = api.service.stores.for_queue(PROJECT, definition).get_metadata(PROJECT, definition)
    assert metadata is not None
    slot = api.clock.now_ms() + 60_000
    first = {"schedule": "sweep", "generation": metadata["generation"], "slot": slot, "fires": 0}
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=60_000)
        assert dispatcher.run_once() == 1
        assert tick_count(api) == 1
        api.clock.advance(ms=(TICK_DEDUP_S + 3600) * 1000)
        api.service.schedules.fire(PROJECT, names.tick_queue("q"), first, api.clock.now_ms())
        assert tick_count(api) == 2  # the fork: its successor's id was forgotten
        assert dispatcher.run_once() == 2
        assert tick_count(api) == 1
        fires = api.get("/v2/queues/q/schedules/sweep").json["fires"]
        for _ in range(3):
            api.clock.advance(ms=60_000)
            assert dispatcher.run_once() == 1
            assert tick_count(api) == 1
        assert api.get("/v2/queues/q/schedules/sweep").json["fires"] == fires + 3


def test_a_skip_catch_up_posted_past_the_next_slot_stands_for_that_slot_too(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A late tick's catch-up posted after the next slot has come (a store slow to answer the
    fire's first read, after a restart) is the one message of every slot up to then: the
    next slot does not fire a second message beside it."""
    written = api.clock.now_ms()
    api.put("/v2/queues/q/schedules/sweep", json=EVERY_MINUTE)
    first_slot = written + 60_000
    records = api.service.schedules.ticks.records
    read = records.definitions_and_states

    def slow_read(*args: Any) -> Any:
        api.clock.advance(ms=10)  # the catch-up is posted 5 ms past the third slot
        return read(*args)

    monkeypatch.setattr(records, "definitions_and_states", slow_read)
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=first_slot + 2 * 60_000 - 5 - written)  # two slots missed
        for _ in range(3):
            dispatcher.run_once()
    assert messages(api) == [{"job": "sweep"}]
    claimed = api.post(
        "/v2/queues/q/claims", json={"ttl": 60}, query_string="with_schedule=true&limit=5"
    )
    [fired] = claimed.json["messages"]
    assert epoch_ms(fired["due"]) == first_slot + 2 * 60_000 + 5, fired
    shown = api.get("/v2/queues/q/schedules/sweep").json
    assert shown["fires"] == 1
    assert shown["next"][0] == iso(first_slot + 3 * 60_000)
    # The first two slots and the third, which came while the catch-up was being posted.
    labels = f'project="{PROJECT}",queue="q",schedule="sweep"'
    counted = api.service.metrics.render().decode()
    assert f"zaqar_delay_schedule_missed_slots_total{{{labels}}} 2.0" in counted


def test_a_catch_up_after_a_slow_read_is_posted_not_refused_as_long_past(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fire whose first read takes longer than a post's tolerance for a ``deliver_at`` in
    the past (5 s) still posts its catch-up, due when posted."""
    api.put("/v2/queues/q/schedules/sweep", json=EVERY_MINUTE)
    records = api.service.schedules.ticks.records
    read = records.definitions_and_states

    def slow_read(*args: Any) -> Any:
        api.clock.advance(ms=6_000)
        return read(*args)

    monkeypatch.setattr(records, "definitions_and_states", slow_read)
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=150_000)  # two slots missed
        assert dispatcher.run_once() == 1
    assert messages(api) == [{"job": "sweep"}]
    assert api.get("/v2/queues/q/schedules/sweep").json["fires"] == 1


def test_a_skip_schedule_written_again_while_late_fires_its_slots_once(api: Api) -> None:
    """Written again unchanged while its tick is late, a ``skip`` schedule has two ticks (the
    late one and the one the write posts for the next slot): the late one's catch-up stands
    for the next slot, so the other posts nothing."""
    api.put("/v2/queues/q/schedules/sweep", json=EVERY_MINUTE)
    api.clock.advance(ms=2 * 60_000 - LEAD_MS)  # the first slot missed, the second's tick due
    assert api.put("/v2/queues/q/schedules/sweep", json=EVERY_MINUTE).status_code == 204
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=LEAD_MS + 1_000)  # past the second slot: both ticks due
        for _ in range(3):
            dispatcher.run_once()
    assert messages(api) == [{"job": "sweep"}]
    assert api.get("/v2/queues/q/schedules/sweep").json["fires"] == 1


def test_run_fires_once_now_without_moving_the_plan(api: Api) -> None:
    api.put("/v2/queues/q/schedules/sweep", json=EVERY_MINUTE)
    before = api.get("/v2/queues/q/schedules/sweep").json["next"]
    ran = api.post("/v2/queues/q/schedules/sweep/run")
    assert ran.status_code == 201, ran.text
    [now] = claim(api)
    assert now["id"] == ran.json["message_id"] and now["body"] == {"job": "sweep"}
    assert api.get("/v2/queues/q/schedules/sweep").json["next"] == before
    assert api.post("/v2/queues/q/schedules/none/run").status_code == 404


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        ({"cron": "0 25 * * *", "message": {"body": 1}}, "not valid"),
        ({"cron": "0 9 * * *", "timezone": "Europe/Atlantis", "message": {"body": 1}}, "IANA"),
        ({"every": 60, "end_at": "2001-01-01T00:00:00Z", "message": {"body": 1}}, "no slot"),
        ({"every": 60}, '"message"'),
        ({"every": 60, "message": {"body": 1, "ttl": 5}}, "TTL"),
        ({"every": 60, "message": {"body": 1}, "colour": "red"}, "no field"),
        ({"every": 60, "message": {"body": "x" * 300}}, "at most 200"),
        # Posted up to 2 s before its slot, its ttl counting from then: never seen.
        ({"every": 60, "message": {"body": 1, "ttl": 60, "delay": 59}}, "expire before"),
        # Its tick, a stored message, would expire before the first slot.
        ({"every": 60, "start_at": "2200-01-01T00:00:00Z", "message": {"body": 1}}, "136"),
    ],
)
def test_a_schedule_that_cannot_be_is_a_400_and_nothing_is_written(
    api: Api, document: dict[str, Any], fragment: str
) -> None:
    assert api.put("/v2/queues/q", json={"_max_messages_post_size": 200}).status_code == 201
    refused = api.put("/v2/queues/q/schedules/bad", json=document)
    assert refused.status_code == 400, refused.text
    assert fragment in refused.json["description"]
    assert api.get("/v2/queues/q/schedules").json["schedules"] == []
    assert api.get("/v2/queues/q/schedules/bad").status_code == 404


def test_a_schedule_s_message_must_live_past_its_due_time(api: Api) -> None:
    """A message's ttl counts from its post, up to ``LEAD_MS`` before its slot: a schedule
    whose message would expire before its slot plus its delay (its own ttl, or the queue's
    default) is refused (its messages all expired unseen); one that lives a moment past
    its due time is taken, and its message claimed."""
    assert api.put("/v2/queues/q", json={"_default_message_ttl": 62}).status_code == 201
    unseen = {"every": 60, "message": {"body": "late", "delay": 60}}
    refused = api.put("/v2/queues/q/schedules/s", json=unseen)
    assert refused.status_code == 400 and "expire before" in refused.json["description"]
    written = api.clock.now_ms()
    seen = {"every": 60, "message": {"body": "just", "delay": 59}}
    assert api.put("/v2/queues/q/schedules/s", json=seen).status_code == 201
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=written + 60_000 - LEAD_MS - api.clock.now_ms())
        assert dispatcher.run_once() == 1
    api.clock.advance(ms=LEAD_MS + 59_000)
    assert [m["body"] for m in claim(api)] == ["just"]


def test_a_queue_change_that_would_break_one_of_its_schedules_is_refused(api: Api) -> None:
    """A PATCH of the queue that takes from one of its schedules what its message needs (a
    default ttl it relies on no longer than its delay plus the lead, a post size under its
    message's) answers 409 naming the schedule, and changes nothing; a schedule whose
    message has a ttl of its own does not rely on the default. Once the schedule is gone,
    the same change is applied."""
    assert api.put("/v2/queues/q", json={"_default_message_ttl": 600}).status_code == 201
    relying = {"every": 60, "message": {"body": "x" * 500, "delay": 60}}
    assert api.put("/v2/queues/q/schedules/relying", json=relying).status_code == 201
    own = {"every": 60, "message": {"body": "y", "delay": 60, "ttl": 300}}
    assert api.put("/v2/queues/q/schedules/own", json=own).status_code == 201

    def replace(key: str, value: int) -> Any:
        change = [{"op": "replace", "path": f"/metadata/{key}", "value": value}]
        return api.patch("/v2/queues/q", body=json.dumps(change), headers=JSON_PATCH)

    before = api.get("/v2/queues/q").json
    for key, value, why in [
        ("_default_message_ttl", 62, "would expire before it is due"),
        ("_max_messages_post_size", 400, "takes at most 400"),
    ]:
        refused = replace(key, value)
        assert_error(refused, 409, "Resource conflict")
        assert "Schedule relying of queue q" in refused.json["description"], refused.json
        assert why in refused.json["description"]
        assert api.get("/v2/queues/q").json == before
    assert replace("_default_message_ttl", 63).status_code == 200  # lives a moment past due
    assert api.delete("/v2/queues/q/schedules/relying").status_code == 204
    assert replace("_default_message_ttl", 62).status_code == 200
    assert replace("_max_messages_post_size", 400).status_code == 200
    assert api.get("/v2/queues/q").json["_max_messages_post_size"] == 400


def test_a_schedule_is_held_to_the_post_its_fires_make(api: Api) -> None:
    """A fire posts the message with a dedup id and ``deliver_at`` of its own: a message
    that fits the queue's post size limit only without them is refused when the schedule is
    written (its every fire failed), and one whose fires fit it, with the longest name and
    dedup key there are, fires on its slot and when run."""
    assert api.put("/v2/queues/q", json={"_max_messages_post_size": 400}).status_code == 201
    name = "s" * 64
    fits_alone = {"body": "", "ttl": 600}
    fits_alone["body"] = "x" * (400 - post_size(fits_alone))
    assert post_size(fits_alone) == 400 < fire_post_size(name, fits_alone)
    refused = api.put(f"/v2/queues/q/schedules/{name}", json={"every": 60, "message": fits_alone})
    assert_error(refused, 400, "Invalid API request")
    assert "the dedup id and deliver_at each fire adds" in refused.json["description"]
    fits = {"body": "", "ttl": 600}
    fits["body"] = "x" * (400 - fire_post_size(name, fits))
    assert fire_post_size(name, fits) == 400
    written = api.clock.now_ms()
    path = f"/v2/queues/q/schedules/{name}"
    assert api.put(path, json={"every": 60, "message": fits}).status_code == 201
    assert api.post(f"{path}/run").status_code in (200, 201)
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=written + 60_000 - LEAD_MS - api.clock.now_ms())
        assert dispatcher.run_once() == 1
    shown = api.get(path).json
    assert shown["fires"] == 1 and shown["last_error"] is None, shown
    assert messages(api) == [fits["body"], fits["body"]]


def test_slots_caught_up_together_are_posted_in_posts_the_queue_takes(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> None:
    """With ``misfire: all``, the ten slots of an outage are posted by one fire: more bytes
    together than the queue's post size limit takes (it once failed every retry, and the
    schedule never fired again). They are posted in halves until each post fits, each slot
    once: a slot whose message a client had posted with its dedup id is not posted again,
    and is journaled as a repeat (the message stored before)."""
    journal = JournalSettings(path=str(tmp_path / "journal"))
    for api in api_on(request, "embedded", journal=journal):
        assert api.put("/v2/queues/q", json={"_max_messages_post_size": 1000}).status_code == 201
        every = {"every": 60, "misfire": "all", "message": {"body": "x" * 300, "ttl": 3600}}
        written = api.clock.now_ms()
        assert api.put("/v2/queues/q/schedules/s", json=every).status_code == 201
        slots = [written + k * 60_000 for k in range(1, 11)]
        one = {"body": "x" * 300, "ttl": 3600, "dedup_id": f"schedule:s:{slots[6]}"}
        [taken] = api.post_messages("q", one)
        assert 10 * fire_post_size("s", every["message"]) > 1000  # the fault: too many
        api.clock.advance(ms=slots[-1] + 1000 - api.clock.now_ms())  # an outage of ten slots
        with dispatching(api) as dispatcher:
            assert dispatcher.run_once() == 1
        shown = api.get("/v2/queues/q/schedules/s").json
        assert shown["fires"] == 10 and shown["last_error"] is None, shown
        assert len(messages(api)) == 10  # nine fired, and the one the client posted
        lines = [
            json.loads(line)
            for path in sorted((tmp_path / "journal").glob("*.jsonl"))
            for line in path.read_text().splitlines()
        ]
        fired = [line for line in lines if line["event"] == "scheduled"]
        assert [f["slot"] for f in fired if "repeat" not in f] == slots[:6] + slots[7:]
        [repeat] = [f for f in fired if f.get("repeat")]
        assert (repeat["slot"], repeat["message_id"]) == (slots[6], taken)


def test_slots_years_apart_are_planned_and_fired_past_each_gap(api: Api) -> None:
    """A plan whose slots are years apart is written, and its tick is posted that far ahead on
    every store: February 29th skips 2100; the fifth Friday of February is years away."""
    rare = {"cron": "0 9 * 2 5#5", "message": {"body": "rare"}}
    assert api.put("/v2/queues/rare/schedules/rare", json=rare).status_code == 201
    assert api.get("/v2/queues/rare/schedules/rare").json["next"][:3] == [
        "2036-02-29T09:00:00.000Z",
        "2064-02-29T09:00:00.000Z",
        "2092-02-29T09:00:00.000Z",
    ]
    assert api.delete("/v2/queues/rare").status_code == 204
    leap = {"cron": "0 0 29 2 *", "start_at": "2096-01-01T00:00:00Z", "message": {"body": 1}}
    assert api.put("/v2/queues/q/schedules/leap", json=leap).status_code == 201
    shown = api.get("/v2/queues/q/schedules/leap").json["next"]
    assert shown[:2] == ["2096-02-29T00:00:00.000Z", "2104-02-29T00:00:00.000Z"]
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=epoch_ms("2096-02-29T00:00:00+00:00") - api.clock.now_ms())
        assert dispatcher.run_once() == 1
        assert [m["body"] for m in claim(api)] == [1]
        assert api.get("/v2/queues/q/schedules/leap").json["next"][0] == (
            "2104-02-29T00:00:00.000Z"
        )
        api.clock.advance(ms=epoch_ms("2104-02-29T00:00:00+00:00") - api.clock.now_ms())
        assert dispatcher.run_once() == 1
        assert [m["body"] for m in claim(api)] == [1]
        assert api.get("/v2/queues/q/schedules/leap").json["fires"] == 2


def test_a_schedule_name_is_held_to_a_queue_name_s_rules(api: Api) -> None:
    refused = api.put("/v2/queues/q/schedules/a~b", json=EVERY_MINUTE)
    assert_error(refused, 400, "Invalid schedule identification")


def test_list_pages_and_schedules_are_not_queues(api: Api) -> None:
    for name in ("a", "b", "c"):
        assert api.put(f"/v2/queues/q/schedules/{name}", json=EVERY_MINUTE).status_code == 201
    first = api.get("/v2/queues/q/schedules", query_string="limit=2").json
    assert [s["name"] for s in first["schedules"]] == ["a", "b"]
    path, query = first["links"][0]["href"].split("?")
    assert [s["name"] for s in api.get(path, query_string=query).json["schedules"]] == ["c"]
    # Writing them created q (as subscribing does); their queues are the server's own: in
    # no listing, no count, no subscription list.
    listed = api.get("/v2/queues", query_string="with_count=true").json
    assert ([q["name"] for q in listed["queues"]], listed["count"]) == (["q"], 1)
    assert api.get("/v2/topics").json["topics"] == []
    assert api.get("/v2/queues/q/subscriptions").json["subscriptions"] == []
    assert api.get("/v2/queues/q/schedules", headers={"X-Project-ID": "other"}).json == {
        "schedules": [],
        "links": [],
    }
    assert api.get("/v2/queues/q/schedules/a", headers={"X-Project-ID": "other"}).status_code == (
        404
    )


def test_a_listing_reads_its_page_of_schedules_in_one_store_call(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page of ten schedules: their definitions, states and failures in one bulk read
    (it was two reads a schedule)."""
    [api] = api_on(request, "embedded")
    for n in range(10):
        assert api.put(f"/v2/queues/q/schedules/s{n}", json=EVERY_MINUTE).status_code == 201
    reads: list[str] = []
    for method in ("get_metadata", "get_metadata_many"):
        real = getattr(api.driver, method)

        def counted(*args: Any, _real: Any = real, _method: str = method) -> Any:
            reads.append(_method)
            return _real(*args)

        monkeypatch.setattr(api.driver, method, counted)
    listed = api.get("/v2/queues/q/schedules", query_string="limit=10").json["schedules"]
    assert [s["name"] for s in listed] == [f"s{n}" for n in range(10)]
    assert all(s["last_fire"] is None and len(s["next"]) == 5 for s in listed)
    assert reads == ["get_metadata_many"]


def test_deleting_a_schedule_or_its_queue_ends_it(api: Api) -> None:
    api.put("/v2/queues/q/schedules/sweep", json=EVERY_MINUTE)
    api.put("/v2/queues/q/schedules/other", json=EVERY_MINUTE)
    assert api.delete("/v2/queues/q/schedules/sweep").status_code == 204
    assert api.get("/v2/queues/q/schedules/sweep").status_code == 404
    assert api.delete("/v2/queues/q").status_code == 204
    assert api.get("/v2/queues/q/schedules").json["schedules"] == []
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=120_000)
        dispatcher.run_once()
    assert api.get("/v2/queues").json["queues"] == []


def test_deleting_a_queue_deletes_what_a_fire_racing_a_schedule_s_deletion_left(
    api: Api,
) -> None:
    """A fire that read a schedule just before it was deleted writes its state and its
    failure afterwards, recreating those two queues with no definition beside them: deleting
    the queue deletes them too (they were kept for ever)."""
    api.put("/v2/queues/q/schedules/gone", json=EVERY_MINUTE)
    assert api.delete("/v2/queues/q/schedules/gone").status_code == 204
    records, now = api.service.schedules.records, api.clock.now_ms()
    records.write_states(PROJECT, "q", {"gone": {"fires": 1, "slot": now, "at": now}}, now)
    records.write_failures(PROJECT, "q", {"gone": {"at": now}}, now)
    left = [names.state_queue("q", "gone"), names.error_queue("q", "gone")]
    assert [api.store(queue).get_metadata(PROJECT, queue) for queue in left] == [
        {"fires": 1, "slot": now, "at": now},
        {"at": now},
    ]
    assert api.delete("/v2/queues/q").status_code == 204
    assert [api.store(queue).get_metadata(PROJECT, queue) for queue in left] == [None, None]


def test_a_schedule_deleted_and_written_again_fires_one_chain_of_ticks(api: Api) -> None:
    """A deleted schedule's next tick stays in the tick queue, to fire nothing. Written again
    under its name before that tick is due, the new schedule does not take it for its own
    (it did, as both were generation 1: two chains of ticks fired every slot for ever,
    overwrote each other's state, and a ``limit: 2`` schedule posted three messages)."""
    limited = {"every": 60, "limit": 2, "message": {"body": "again", "ttl": 600}}
    assert api.put("/v2/queues/q/schedules/s", json=limited).status_code == 201
    assert api.delete("/v2/queues/q/schedules/s").status_code == 204
    assert tick_count(api) == 1  # left behind, to fire nothing
    api.clock.advance(ms=1000)
    assert api.put("/v2/queues/q/schedules/s", json=limited).status_code == 201
    with dispatching(api) as dispatcher:
        for fires in (1, 2, 2):
            api.clock.advance(ms=60_000)
            dispatcher.run_once()
            assert api.get("/v2/queues/q/schedules/s").json["fires"] == fires
    assert messages(api) == ["again", "again"]
    assert tick_count(api) == 0


def test_a_schedule_written_again_after_a_fire_raced_its_deletion_starts_afresh(
    api: Api,
) -> None:
    """The state and failure a fire racing a schedule's deletion left are not the next
    schedule's of that name: it starts with no fire, no last fire or error, and its whole
    ``limit`` (it took the old state's fires, and here never fired)."""
    limited = {"every": 60, "limit": 2, "message": {"body": "again", "ttl": 600}}
    assert api.put("/v2/queues/q/schedules/gone", json=limited).status_code == 201
    assert api.delete("/v2/queues/q/schedules/gone").status_code == 204
    records, now = api.service.schedules.records, api.clock.now_ms()
    slot = now + 120_000
    old = {"fires": 2, "slot": slot, "through": slot, "message_id": "m", "at": now}
    records.write_states(PROJECT, "q", {"gone": old}, now)
    failure = {"at": now, "since": now, "slot": slot, "generation": 1, "title": "t"}
    records.write_failures(PROJECT, "q", {"gone": {**failure, "description": "d"}}, now)
    left = [names.state_queue("q", "gone"), names.error_queue("q", "gone")]
    assert all(api.store(queue).get_metadata(PROJECT, queue) for queue in left)  # the fault
    api.clock.advance(ms=1000)
    written = api.clock.now_ms()
    assert api.put("/v2/queues/q/schedules/gone", json=limited).status_code == 201
    shown = api.get("/v2/queues/q/schedules/gone").json
    assert (shown["fires"], shown["last_fire"], shown["last_error"]) == (0, None, None)
    assert shown["next"] == [iso(written + 60_000), iso(written + 120_000)]
    with dispatching(api) as dispatcher:
        for _ in range(3):
            api.clock.advance(ms=60_000)
            dispatcher.run_once()
    assert api.get("/v2/queues/q/schedules/gone").json["fires"] == 2
    assert messages(api) == ["again", "again"]


def test_schedule_limits_and_the_queue_quota(request: pytest.FixtureRequest) -> None:
    limits = Limits(max_schedules_per_queue=2, max_queues_per_project=1)
    for limited in api_on(request, "embedded", limits=limits):
        assert limited.put("/v2/queues/q/schedules/a", json=EVERY_MINUTE).status_code == 201
        assert limited.put("/v2/queues/q/schedules/b", json=EVERY_MINUTE).status_code == 201
        refused = limited.put("/v2/queues/q/schedules/c", json=EVERY_MINUTE)
        assert_error(refused, 403, "Quota exceeded")
        # Writing them created q, the project's one queue (four queues of the server's own
        # are not counted): a schedule of another queue would post to a queue the project
        # has no room for, and fire never. It is refused, and nothing is written.
        assert limited.put("/v2/queues/q").status_code == 204
        assert_error(limited.put("/v2/queues/r"), 403, "Quota exceeded")
        elsewhere = limited.put("/v2/queues/r/schedules/a", json=EVERY_MINUTE)
        assert_error(elsewhere, 403, "Quota exceeded")
        assert limited.get("/v2/queues/r/schedules/a").status_code == 404
        assert [q["name"] for q in limited.get("/v2/queues").json["queues"]] == ["q"]
        assert limited.delete("/v2/queues/q").status_code == 204
        assert limited.put("/v2/queues/r/schedules/a", json=EVERY_MINUTE).status_code == 201


def test_a_topic_s_schedule_is_pushed_to_its_subscribers_at_each_slot(api: Api) -> None:
    with receiver() as hook, dispatching(api) as dispatcher:
        subscribed = api.post("/v2/topics/t/subscriptions", json={"subscriber": hook.url})
        assert subscribed.status_code == 201
        written = api.clock.now_ms()
        assert api.put("/v2/topics/t/schedules/ping", json=EVERY_MINUTE).status_code == 201
        api.clock.advance(ms=60_000 - LEAD_MS)
        assert dispatcher.run_once() == 1  # the tick: the message is posted, due at the slot
        assert hook.received == []
        api.clock.advance(ms=LEAD_MS - 1)
        assert dispatcher.run_once() == 0
        api.clock.advance(ms=1)
        assert dispatcher.run_once() == 1
        [push] = hook.wait_for(1)
        assert push.json()["body"] == {"job": "sweep"}
        assert push.json()["queue_name"] == "t"
        assert api.get("/v2/topics/t/schedules/ping").json["last_fire"]["slot"] == iso(
            written + 60_000
        )


def test_dispatcher_without_a_fire_retries_the_tick(api: Api) -> None:
    """A process whose senders fire no schedules leaves the tick owed (another fires it)."""
    from tests.helpers.push import senders

    api.put("/v2/queues/q/schedules/sweep", json=EVERY_MINUTE)
    blind = Dispatcher(api.service, senders(), concurrency=2)
    try:
        api.clock.advance(ms=59_000)
        assert blind.run_once() == 1
        assert messages(api) == []
    finally:
        blind.stop()
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=5_000)  # past the first quick retries
        dispatcher.run_once()
        assert messages(api) == [{"job": "sweep"}]


@pytest.mark.parametrize(("most_s", "delay_s"), [(900, 900), (900, 899), (1, 1), (1, 0)])
def test_a_message_delayed_about_the_most_there_is_fires_at_its_first_attempt(
    request: pytest.FixtureRequest, most_s: int, delay_s: int
) -> None:
    """A post is refused a due time more than ``max_message_delay`` ahead: a tick that fired
    ``LEAD_MS`` before its slot had each fire of a message delayed within 2 s of that refused
    until its slot had passed (a failure shown, retries). Its tick is now due late enough, and
    the message is still due at its slot plus its delay."""
    [api] = api_on(request, "embedded", limits=Limits(max_message_delay=most_s))
    written = api.clock.now_ms()
    document = {"every": 60, "message": {"body": "x", "ttl": 3600, "delay": delay_s}}
    assert api.put("/v2/queues/q/schedules/s", json=document).status_code == 201
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=60_000 - LEAD_MS - 100)
        while api.clock.now_ms() < written + 61_000:
            api.clock.advance(ms=100)
            dispatcher.run_once()
            assert api.get("/v2/queues/q/schedules/s").json["last_error"] is None
    assert api.get("/v2/queues/q/schedules/s").json["fires"] == 1
    assert "zaqar_delay_schedule_failed_fires_total{" not in api.service.metrics.render().decode()
    [listed] = api.get("/v2/queues/q/messages", query_string="include_delayed=true&echo=true").json[
        "messages"
    ]
    shown = api.get(f"/v2/queues/q/messages/{listed['id']}", query_string="with_schedule=true")
    assert shown.json["due"] == iso(written + 60_000 + delay_s * 1000)


def test_a_tick_fired_ahead_is_fired_less_early_than_its_lead_allows() -> None:
    """``lead_ms`` leaves ``EARLY_MS`` for a dispatcher that fires a tick before it is owed."""
    assert LEASE_AHEAD_MS < EARLY_MS


def test_a_fire_is_counted_late_only_when_its_message_could_not_be_due_on_time(api: Api) -> None:
    """A message with a ``delay`` is due that long after its slot: posted ahead, it is on
    time; posted once its slot and delay have both passed (after an outage), it is late."""
    delayed = {**EVERY_MINUTE, "message": {**EVERY_MINUTE["message"], "delay": 30}}
    api.put("/v2/queues/q/schedules/sweep", json=delayed)
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=60_000 - LEAD_MS)
        dispatcher.run_once()  # due at its slot plus 30 s
        api.clock.advance(ms=5 * 60_000 + LEAD_MS + 40_000)  # the latest slot and its delay past
        dispatcher.run_once()
    assert len(messages(api)) == 2
    shown = api.service.metrics.render().decode()
    labels = f'project="{PROJECT}",queue="q",schedule="sweep"'
    assert f'zaqar_delay_schedule_fires_total{{late="false",{labels}}} 1.0' in shown
    assert f'zaqar_delay_schedule_fires_total{{late="true",{labels}}} 1.0' in shown


def test_fires_are_journaled_and_counted_with_the_slots_they_skipped(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> None:
    journal = JournalSettings(path=str(tmp_path / "journal"))
    for api in api_on(request, "embedded", journal=journal):
        written = api.clock.now_ms()
        api.put("/v2/queues/q/schedules/sweep", json=EVERY_MINUTE)
        with dispatching(api) as dispatcher:
            api.clock.advance(ms=60_000 - LEAD_MS)
            dispatcher.run_once()  # on time: posted ahead, due at its slot
            api.clock.advance(ms=5 * 60_000 + LEAD_MS + 500)  # an outage of five slots
            dispatcher.run_once()
        lines = [
            json.loads(line)
            for path in sorted((tmp_path / "journal").glob("*.jsonl"))
            for line in path.read_text().splitlines()
        ]
        fires = [line for line in lines if line["event"] == "scheduled"]
        assert [(f["schedule"], f["slot"], f["due"], f["delay"]) for f in fires] == [
            ("sweep", written + 60_000, written + 60_000, 0),
            ("sweep", written + 360_000, api.clock.now_ms(), 0),  # skip: the latest, late
        ]
        shown = api.service.metrics.render().decode()
        labels = f'project="{PROJECT}",queue="q",schedule="sweep"'
        assert f'zaqar_delay_schedule_fires_total{{late="false",{labels}}} 1.0' in shown
        assert f'zaqar_delay_schedule_fires_total{{late="true",{labels}}} 1.0' in shown
        assert f"zaqar_delay_schedule_missed_slots_total{{{labels}}} 4.0" in shown


def refusing_the_first_state_write(api: Api) -> list[list[str]]:
    """Make the first write of schedules' states fail (a store error after their messages
    were posted): the names of the schedules whose states it refused are appended to the
    list returned, the fault's evidence."""
    records = api.service.schedules.ticks.records
    write_states, refused = records.write_states, []

    def failing_once(*args: Any) -> None:
        if not refused:
            refused.append(sorted(args[2]))
            raise ConnectionError("the store refused the states")
        write_states(*args)

    records.write_states = failing_once  # type: ignore[method-assign]
    return refused


@pytest.mark.parametrize("misfire", ["skip", "all"])
def test_a_fire_whose_state_write_failed_counts_to_the_limit(api: Api, misfire: str) -> None:
    """Ticks fired together whose messages were posted but whose state write failed are fired
    again at once, each by itself. A ``skip`` repeat posts nothing its first fire stood for,
    and recorded no fire either: the slot's message went uncounted, ``last_fire`` stayed null
    and a ``limit: 2`` schedule posted three messages."""
    start = views.timestamp_ms(api.clock.now_ms() + 60_000)
    limited = {"every": 60, "start_at": start, "limit": 2, "misfire": misfire}
    for name, body in (("s", "n"), ("beside", "b")):
        document = {**limited, "message": {"body": body, "ttl": 600}}
        assert api.put(f"/v2/queues/q/schedules/{name}", json=document).status_code == 201
    refused = refusing_the_first_state_write(api)
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=60_000)
        dispatcher.run_once()
        assert refused == [["beside", "s"]]  # the fault: both fires' states refused together
        for name in ("s", "beside"):
            shown = api.get(f"/v2/queues/q/schedules/{name}").json
            assert shown["fires"] == 1 and shown["last_fire"]["slot"] == start, shown
        for _ in range(3):
            api.clock.advance(ms=60_000)
            dispatcher.run_once()
    assert api.get("/v2/queues/q/schedules/s").json["fires"] == 2
    assert sorted(messages(api)) == ["b", "b", "n", "n"]
    assert tick_count(api) == 0


@pytest.mark.parametrize("misfire", ["skip", "all"])
def test_a_tick_a_rewrite_posted_beside_a_late_one_counts_its_fires(api: Api, misfire: str) -> None:
    """Written again unchanged while its tick is late, a schedule gets a second tick, of its
    next slot, which carried the fires counted when it was posted: the late tick's fire
    went uncounted, and a ``limit: 2`` schedule posted three messages."""
    start = api.clock.now_ms() + 60_000
    limited = {"every": 60, "start_at": views.timestamp_ms(start), "limit": 2, "misfire": misfire}
    document = {**limited, "message": {"body": "n", "ttl": 600}}
    assert api.put("/v2/queues/q/schedules/s", json=document).status_code == 201
    api.clock.advance(ms=60_000)  # the first slot's tick is late: no dispatcher ran
    assert api.put("/v2/queues/q/schedules/s", json=document).status_code == 204
    assert tick_count(api) == 2  # the fault
    with dispatching(api) as dispatcher:
        for _ in range(4):
            dispatcher.run_once()
            api.clock.advance(ms=60_000)
    shown = api.get("/v2/queues/q/schedules/s").json
    assert shown["fires"] == 2 and shown["last_fire"]["slot"] == views.timestamp_ms(start + 60_000)
    assert messages(api) == ["n", "n"]
    assert tick_count(api) == 0


@pytest.mark.parametrize("misfire", ["skip", "all"])
def test_a_fire_retried_after_its_next_slot_counts_what_it_posted(api: Api, misfire: str) -> None:
    """A fire whose messages were posted but whose state write failed is retried later; when
    the retry comes after the next slot, a ``skip`` one posted for the latest slot and did
    not count its first attempt's message: ``fires`` showed one fewer, and a ``limit: 2``
    schedule posted three messages."""
    limited = {"every": 60, "limit": 2, "misfire": misfire, "message": {"body": "n", "ttl": 900}}
    assert api.put("/v2/queues/q/schedules/s", json=limited).status_code == 201
    refused = refusing_the_first_state_write(api)
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=60_000)
        dispatcher.run_once()
        assert refused == [["s"]] and messages(api) == ["n"]  # the fault: posted, unrecorded
        assert api.get("/v2/queues/q/schedules/s").json["fires"] == 0
        api.clock.advance(ms=60_000)  # the retry comes after the next slot
        dispatcher.run_once()
        assert api.get("/v2/queues/q/schedules/s").json["fires"] == 2
        for _ in range(3):
            api.clock.advance(ms=60_000)
            dispatcher.run_once()
    assert messages(api) == ["n", "n"]
    assert api.get("/v2/queues/q/schedules/s").json["fires"] == 2
    assert tick_count(api) == 0
