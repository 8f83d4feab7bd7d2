"""Claims that wait (?wait=S): woken by posts, releases and reschedules, bounded by S."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator

import falcon.testing
import pytest

from tests.helpers.api import API_STORES, PROJECT, Api, api_of, assert_error
from zaqar_delay import waiting
from zaqar_delay.conf import Limits
from zaqar_delay.errors import StorageUnavailable

# Wake-ups are the store's own (Redis pub/sub, MongoDB change streams, polling on Swift).
pytestmark = pytest.mark.store_paths

# A waiting claim in these tests waits this long, and must be answered well within it: a
# wake-up takes milliseconds, and a claim answered only when its wait runs out was not woken.
WAIT_S = 20
WOKEN_WITHIN_S = 8


class Waiter:
    """A claim on queue q that waits ``WAIT_S`` seconds, made in a thread of its own."""

    def __init__(self, api: Api, project: str = PROJECT, **params: str) -> None:
        self._result: list[falcon.testing.Result] = []
        self._thread = threading.Thread(
            target=lambda: self._result.append(
                api.post(
                    "/v2/queues/q/claims",
                    params={"wait": str(WAIT_S), **params},
                    headers={"X-Project-ID": project},
                )
            )
        )
        self._thread.start()

    def answer(self) -> falcon.testing.Result:
        """The claim's answer, which must come before ``WOKEN_WITHIN_S`` seconds from now
        (so from a wake-up, not from the end of its wait)."""
        self._thread.join(WOKEN_WITHIN_S)
        assert not self._thread.is_alive(), "the waiting claim was not woken"
        [response] = self._result
        return response


@pytest.fixture(autouse=True)
def timers_beyond_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """A waiting claim's timer re-checks the queue only after a minute: within a test, only
    the store's wake-up can end a wait early, so a wake-up that never comes fails it."""
    monkeypatch.setattr(waiting, "ANNOUNCE_EVERY_S", 60.0)
    monkeypatch.setattr(waiting, "RECHECK_WITH_WAKEUPS_S", 60.0)
    monkeypatch.setattr(waiting, "RECHECK_WITHOUT_WAKEUPS_S", 60.0)


@pytest.fixture
def short_announcements(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """Announcements that live 300 ms, renewed every 100 ms; a store without wake-ups (whose
    waiters poll, announcing nothing) skips the test."""
    if api.store("q").wakeups() is None:
        pytest.skip("the store sends no wake-ups: its waiters poll")
    monkeypatch.setattr(waiting, "ANNOUNCE_TTL_MS", 300)
    monkeypatch.setattr(waiting, "ANNOUNCE_EVERY_S", 0.1)


def settle(api: Api, count: int = 1, project: str = PROJECT) -> None:
    """Wait until ``count`` claims on queue q have found nothing and fallen asleep, so what
    the test does next has to wake them."""
    deadline = time.monotonic() + 10
    while (
        api.service.wait_rooms.of(api.service.stores.for_queue(project, "q")).asleep(project, "q")
        < count
    ):
        assert time.monotonic() < deadline, f"{count} claims never started waiting"
        time.sleep(0.01)


def test_wait_ends_with_204_when_nothing_comes(api: Api) -> None:
    result = api.post("/v2/queues/q/claims", params={"wait": "0.2"})
    assert result.status_code == 204


def test_a_post_wakes_a_waiting_claim(api: Api) -> None:
    waiter = Waiter(api)
    settle(api)
    [mid] = api.post_messages("q", {"body": "wake up"})
    response = waiter.answer()
    assert response.status_code == 201
    assert [m["id"] for m in response.json["messages"]] == [mid]


@pytest.mark.usefixtures("short_announcements")
def test_a_head_asleep_past_the_announcement_is_still_woken(api: Api) -> None:
    # Writers send wake-ups only while a waiter's announcement lives; the head sleeps longer
    # than that, so the process's renewer must keep it alive for the post below to wake it.
    waiter = Waiter(api)
    settle(api)
    time.sleep(1.0)  # the first announcement has expired three times over
    [mid] = api.post_messages("q", {"body": "wake up"})
    response = waiter.answer()
    assert response.status_code == 201
    assert [m["id"] for m in response.json["messages"]] == [mid]


@pytest.mark.usefixtures("short_announcements")
def test_a_head_is_woken_when_its_announcement_lapsed_while_renewals_failed(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store stalls for longer than an announcement lives (renewals time out) while the
    # listener's connection survives, so no reconnection wakes anyone: a message posted
    # meanwhile sends no wake-up, and the head must look again once renewals succeed.
    wakeups = api.store("q").wakeups()
    stalled = threading.Event()
    refused: list[str] = []
    announce = type(wakeups).announce

    def stalling_announce(self: object, project: str, queue: str, ttl_ms: int) -> None:
        if stalled.is_set():
            refused.append(queue)
            raise StorageUnavailable("the store stalls")
        announce(self, project, queue, ttl_ms)  # type: ignore[arg-type]

    monkeypatch.setattr(type(wakeups), "announce", stalling_announce)
    waiter = Waiter(api)
    settle(api)
    stalled.set()
    time.sleep(1.0)  # the last announcement lapsed three times over
    [mid] = api.post_messages("q", {"body": "posted while nobody was announced"})
    stalled.clear()
    assert len(refused) >= 3, "the renewals never failed"
    response = waiter.answer()
    assert response.status_code == 201
    assert [m["id"] for m in response.json["messages"]] == [mid]


@pytest.mark.usefixtures("short_announcements")
def test_queues_waited_on_once_are_forgotten_after_their_announcement_lapsed(api: Api) -> None:
    # A client that waits on a new queue name each time must not grow the process for ever.
    names = [f"once-{n}" for n in range(40)]
    for name in names:
        assert api.post(f"/v2/queues/{name}/claims", params={"wait": "0.01"}).status_code == 204
    rooms = {
        id(room): room
        for room in (
            api.service.wait_rooms.of(api.service.stores.for_queue(PROJECT, name)) for name in names
        )
    }.values()
    assert sum(room.announced() for room in rooms) > 0, "no claim announced its queue"
    deadline = time.monotonic() + 5
    while sum(room.announced() for room in rooms):
        assert time.monotonic() < deadline, "the announcements of ended lines are kept"
        time.sleep(0.05)


def test_a_release_wakes_a_waiting_claim(api: Api) -> None:
    api.post_messages("q", {"body": "held"})
    held = api.post("/v2/queues/q/claims")
    waiter = Waiter(api)
    settle(api)
    api.delete(held.headers["location"])
    assert waiter.answer().status_code == 201


def test_a_reschedule_to_now_wakes_a_waiting_claim(api: Api) -> None:
    [mid] = api.post_messages("q", {"body": "later", "deliver_at": api.clock.now_ms() + 600_000})
    waiter = Waiter(api)
    settle(api)
    api.patch(f"/v2/queues/q/messages/{mid}", json={"delay": 0})
    assert waiter.answer().status_code == 201


def test_a_delayed_message_is_not_claimed_early_by_a_waiter(api: Api) -> None:
    api.post_messages("q", {"body": "later", "deliver_at": api.clock.now_ms() + 60_000})
    result = api.post("/v2/queues/q/claims", params={"wait": "0.3"})
    assert result.status_code == 204  # the fake clock never reaches the due time


def test_many_waiters_each_get_one_message(api: Api) -> None:
    waiters = [Waiter(api, limit="1") for _ in range(5)]
    settle(api, 5)
    api.post_messages("q", *[{"body": i} for i in range(5)])
    bodies = []
    for waiter in waiters:
        response = waiter.answer()
        assert response.status_code == 201
        bodies += [m["body"] for m in response.json["messages"]]
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


@pytest.fixture(params=API_STORES)
def capped(request: pytest.FixtureRequest) -> Iterator[Api]:
    """The API letting a project have two waiting claims per server process."""
    limits = dataclasses.replace(Limits(), max_waiting_claims_per_project=2)
    yield from api_of(request, limits=limits)


def test_a_project_past_its_waiting_claims_is_answered_429_and_others_still_wait(
    capped: Api,
) -> None:
    """Each waiting claim holds a connection of the server process: one project's may not
    take them all."""
    first, second = Waiter(capped, limit="1"), Waiter(capped, limit="1")
    settle(capped, 2)
    started = time.monotonic()
    refused = capped.post("/v2/queues/q/claims", params={"wait": str(WAIT_S)})
    assert time.monotonic() - started < WOKEN_WITHIN_S
    assert_error(refused, 429, "Too many requests")
    assert refused.headers["Retry-After"] == "1"
    assert "max_waiting_claims_per_project" in refused.json["description"]
    scraped = capped.get("/metrics").text
    assert (
        'zaqar_delay_responses_total{method="POST",route="/v2/queues/{queue_name}/claims",'
        'status="429"} 1.0'
    ) in scraped
    # Past the limit a claim still takes what is claimable at once, on any of its queues.
    [ready] = capped.post_messages("r", {"body": "ready"})
    taken = capped.post("/v2/queues/r/claims", params={"wait": str(WAIT_S)})
    assert taken.status_code == 201 and [m["id"] for m in taken.json["messages"]] == [ready]
    # Another project's claims wait as before.
    other = Waiter(capped, project="other-project")
    settle(capped, project="other-project")
    [theirs] = capped.post_messages(
        "q", {"body": "theirs"}, headers={"X-Project-ID": "other-project"}
    )
    assert [m["id"] for m in other.answer().json["messages"]] == [theirs]
    # The two waiting claims still get what comes, and give their places back.
    capped.post_messages("q", {"body": 1}, {"body": 2})
    assert {first.answer().status_code, second.answer().status_code} == {201}
    after = capped.post("/v2/queues/q/claims", params={"wait": "0.2"})
    assert after.status_code == 204
