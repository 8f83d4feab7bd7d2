"""Claims that wait (?wait=S): woken by posts, releases and reschedules, bounded by S."""

from __future__ import annotations

import threading
import time

import pytest

from tests.helpers.api import PROJECT, Api, assert_error
from zaqar_delay import waiting


def claim_in_background(
    api: Api, wait: float, **params: str
) -> tuple[threading.Thread, list[object]]:
    result: list[object] = []

    def run() -> None:
        result.append(api.post("/v2/queues/q/claims", params={"wait": str(wait), **params}))

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


@pytest.fixture(autouse=True)
def timers_beyond_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """A waiting claim's timer re-checks the queue only after a minute: within a test, only
    the store's wake-up can end a wait early, so a wake-up that never comes fails it."""
    monkeypatch.setattr(waiting, "ANNOUNCE_EVERY_S", 60.0)
    monkeypatch.setattr(waiting, "RECHECK_WITHOUT_WAKEUPS_S", 60.0)


def settle(api: Api, count: int = 1) -> None:
    """Wait until ``count`` claims on queue q have found nothing and fallen asleep, so what
    the test does next has to wake them."""
    deadline = time.monotonic() + 10
    while (
        api.service.wait_rooms.of(api.service.stores.for_queue(PROJECT, "q")).asleep(PROJECT, "q")
        < count
    ):
        assert time.monotonic() < deadline, f"{count} claims never started waiting"
        time.sleep(0.01)


def test_wait_ends_with_204_when_nothing_comes(api: Api) -> None:
    result = api.post("/v2/queues/q/claims", params={"wait": "0.2"})
    assert result.status_code == 204


def test_a_post_wakes_a_waiting_claim(api: Api) -> None:
    thread, result = claim_in_background(api, 10)
    settle(api)
    [mid] = api.post_messages("q", {"body": "wake up"})
    thread.join(10)
    [response] = result
    assert response.status_code == 201  # type: ignore[attr-defined]
    assert [m["id"] for m in response.json["messages"]] == [mid]  # type: ignore[attr-defined]


def test_a_release_wakes_a_waiting_claim(api: Api) -> None:
    api.post_messages("q", {"body": "held"})
    held = api.post("/v2/queues/q/claims")
    thread, result = claim_in_background(api, 10)
    settle(api)
    api.delete(held.headers["location"])
    thread.join(10)
    assert result[0].status_code == 201  # type: ignore[attr-defined]


def test_a_reschedule_to_now_wakes_a_waiting_claim(api: Api) -> None:
    [mid] = api.post_messages("q", {"body": "later", "deliver_at": api.clock.now_ms() + 600_000})
    thread, result = claim_in_background(api, 10)
    settle(api)
    api.patch(f"/v2/queues/q/messages/{mid}", json={"delay": 0})
    thread.join(10)
    assert result[0].status_code == 201  # type: ignore[attr-defined]


def test_a_delayed_message_is_not_claimed_early_by_a_waiter(api: Api) -> None:
    api.post_messages("q", {"body": "later", "deliver_at": api.clock.now_ms() + 60_000})
    result = api.post("/v2/queues/q/claims", params={"wait": "0.3"})
    assert result.status_code == 204  # the fake clock never reaches the due time


def test_many_waiters_each_get_one_message(api: Api) -> None:
    waiters = [claim_in_background(api, 10, limit="1") for _ in range(5)]
    settle(api, 5)
    api.post_messages("q", *[{"body": i} for i in range(5)])
    bodies = []
    for thread, result in waiters:
        thread.join(10)
        assert result[0].status_code == 201  # type: ignore[attr-defined]
        bodies += [m["body"] for m in result[0].json["messages"]]  # type: ignore[attr-defined]
    assert sorted(bodies) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("wait", ["-1", "20.5", "nan", "soon"])
def test_invalid_waits(api: Api, wait: str) -> None:
    result = api.post("/v2/queues/q/claims", params={"wait": wait})
    assert result.status_code == 400


def test_wait_boundaries(api: Api) -> None:
    api.post_messages("q", {"body": 1}, {"body": 2})
    assert api.post("/v2/queues/q/claims", params={"wait": "20", "limit": "1"}).status_code == 201
    assert api.post("/v2/queues/q/claims", params={"wait": "0", "limit": "1"}).status_code == 201
    assert_error(
        api.post("/v2/queues/q/claims", params={"wait": "21"}),
        400,
        "Invalid API request",
        "The wait for a claim may not exceed 20 seconds, and must be at least 0 seconds long.",
    )
