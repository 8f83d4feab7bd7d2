"""A schedule whose fires fail says why (``last_error``) while they do, on every store: the
error the queue answered, the slot, when and since when; null once a fire succeeds or the
schedule is written with another body; deleted with the schedule."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.api import PROJECT, Api, api_on, store_post_size_limit
from tests.helpers.push import dispatching
from zaqar_delay import errors
from zaqar_delay.api import views
from zaqar_delay.conf import Limits
from zaqar_delay.schedules import names
from zaqar_delay.schedules.firing import LEAD_MS

BIG = {"every": 60, "message": {"body": {"pad": "x" * 2000}, "ttl": 600}}
SMALL = {"every": 60, "message": {"body": {"n": 1}, "ttl": 600}}
TOO_LARGE = "Message collection size is too large"


@pytest.fixture
def embedded_api(request: pytest.FixtureRequest) -> Iterator[Api]:
    yield from api_on(request, "embedded")


def shown(api: Api, name: str = "big") -> dict[str, Any]:
    answer = api.get(f"/v2/queues/q/schedules/{name}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json)


def failing(api: Api, written_ms: int) -> dict[str, Any]:
    """The schedule ``big`` with its first slot's fire refused: the fault is asserted (no
    fire, the queue's limit below its message), and the schedule as shown is returned."""
    store_post_size_limit(api, "q", 1000)
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=written_ms + 60_000 - LEAD_MS - api.clock.now_ms())
        assert dispatcher.run_once() == 1
    schedule = shown(api)
    assert schedule["fires"] == 0 and schedule["last_fire"] is None
    return schedule


def test_a_failing_schedule_shows_why_and_since_when_until_a_fire_succeeds(api: Api) -> None:
    assert api.put("/v2/queues/q").status_code == 201
    written = api.clock.now_ms()
    assert api.put("/v2/queues/q/schedules/big", json=BIG).status_code == 201
    assert shown(api)["last_error"] is None
    first_at = written + 60_000 - LEAD_MS
    error = failing(api, written)["last_error"]
    assert error["title"] == "Invalid API request"
    assert error["description"].startswith(TOO_LARGE), error
    assert "max_messages_post_size_queue: 1000" in error["description"]
    assert error["slot"] == views.timestamp_ms(written + 60_000)
    assert error["at"] == error["since"] == views.timestamp_ms(first_at)
    listed = api.get("/v2/queues/q/schedules").json["schedules"]
    assert [s["last_error"] for s in listed] == [error]

    with dispatching(api) as dispatcher:
        api.clock.advance(ms=30_000)
        assert dispatcher.run_once() == 1  # the retry fails too
        again = shown(api)["last_error"]
        assert again["at"] == views.timestamp_ms(first_at + 30_000)
        assert again["since"] == error["since"]  # one run of failures
        counted = api.service.metrics.render().decode()
        labels = f'project="{PROJECT}",queue="q",schedule="big"'
        assert f"zaqar_delay_schedule_failed_fires_total{{{labels}}} 2.0" in counted
        store_post_size_limit(api, "q", None)
        api.clock.advance(ms=30_000)
        assert dispatcher.run_once() == 1
        recovered = shown(api)
        assert recovered["fires"] == 1 and recovered["last_error"] is None

        # A later run of failures starts its own ``since``.
        store_post_size_limit(api, "q", 1000)
        api.clock.advance(ms=60_000)
        assert dispatcher.run_once() == 1
        later = shown(api)
        assert later["fires"] == 1
        assert later["last_error"]["since"] == views.timestamp_ms(api.clock.now_ms())
        assert later["last_error"]["since"] != error["since"]


def test_writing_another_body_clears_the_failure_and_the_same_body_keeps_it(
    request: pytest.FixtureRequest,
) -> None:
    """The project's message quota is full, so each fire is refused (a 403 the schedule's
    write does not check): writing the schedule again unchanged keeps showing why; writing
    another body clears it (that plan has not failed yet)."""
    [api] = api_on(request, "embedded", limits=Limits(max_messages_per_project=2))
    assert api.put("/v2/queues/q").status_code == 201
    written = api.clock.now_ms()
    assert api.put("/v2/queues/q/schedules/small", json=SMALL).status_code == 201
    full = {"messages": [{"body": n, "ttl": 600} for n in range(2)]}
    assert api.post("/v2/queues/other/messages", json=full).status_code == 201
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=written + 60_000 - LEAD_MS - api.clock.now_ms())
        assert dispatcher.run_once() == 1
    error = shown(api, "small")["last_error"]
    assert shown(api, "small")["fires"] == 0  # the fault: the fire was refused
    assert error["title"] == "Quota exceeded"
    assert "max_messages_per_project" in error["description"]
    assert api.put("/v2/queues/q/schedules/small", json=SMALL).status_code == 204
    assert shown(api, "small")["last_error"] == error  # a deploy script's rewrite hides nothing
    paused = {**SMALL, "paused": True}
    assert api.put("/v2/queues/q/schedules/small", json=paused).status_code == 204
    assert shown(api, "small")["last_error"] is None


def test_deleting_a_schedule_deletes_its_failure(embedded_api: Api) -> None:
    api = embedded_api
    assert api.put("/v2/queues/q").status_code == 201
    written = api.clock.now_ms()
    assert api.put("/v2/queues/q/schedules/big", json=BIG).status_code == 201
    assert failing(api, written)["last_error"] is not None
    recorded = names.error_queue("q", "big")
    assert api.store(recorded).get_metadata(PROJECT, recorded) is not None
    assert api.delete("/v2/queues/q/schedules/big").status_code == 204
    assert api.store(recorded).get_metadata(PROJECT, recorded) is None
    assert api.put("/v2/queues/q/schedules/big", json=SMALL).status_code == 201
    assert shown(api)["last_error"] is None


def test_a_store_that_fails_is_not_recorded_and_other_failures_are(embedded_api: Api) -> None:
    """``Failures.record`` writes nothing for a store that fails (the record would most
    likely fail too), and records the service's errors and unexpected ones, the latter
    without their text."""
    api = embedded_api
    assert api.put("/v2/queues/q").status_code == 201
    assert api.put("/v2/queues/q/schedules/big", json=BIG).status_code == 201
    generation = api.store(names.definition_queue("q", "big")).get_metadata(
        PROJECT, names.definition_queue("q", "big")
    )
    assert generation is not None
    tick = {"schedule": "big", "generation": generation["generation"], "slot": 5}
    failures = api.service.schedules.ticks.failures
    now = api.clock.now_ms()
    away = errors.StorageUnavailable("the store is away")
    failures.record(PROJECT, "q", {"big": (tick, away)}, now)
    assert shown(api)["last_error"] is None
    stale = {**tick, "generation": generation["generation"] - 1}
    failures.record(PROJECT, "q", {"big": (stale, errors.InvalidRequest("old"))}, now)
    assert shown(api)["last_error"] is None
    failures.record(PROJECT, "q", {"big": (tick, KeyError("internal detail"))}, now)
    error = shown(api)["last_error"]
    assert error["title"] == "Internal server error"
    assert "internal detail" not in error["description"]
