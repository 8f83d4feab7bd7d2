"""A repeat of a post over HTTP while the first post of its dedup id is still within its grace
(MongoDB and Swift, whose posts reserve their ids before storing): a request waits for it
only so long, then answers 503 with Retry-After."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import falcon.testing
import pytest

from tests.helpers.api import Api, api_on
from tests.helpers.dedup_stalls import Stall, after_reserving
from zaqar_delay.storage import dedup_reservation

POST = {"messages": [{"body": "job", "dedup_id": "job-9"}]}


@pytest.fixture(params=["mongodb", "swift"])
def reserving_api(request: pytest.FixtureRequest) -> Iterator[Api]:
    yield from api_on(request, request.param)


def test_a_repeat_that_waited_a_request_long_for_the_first_post_answers_503_with_retry_after(
    reserving_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = reserving_api
    monkeypatch.setattr(dedup_reservation, "FIRST_POST_WAIT_MS", 300)
    stall = Stall()
    after_reserving(monkeypatch, api.driver, {"first": stall})
    answers: dict[str, falcon.testing.Result] = {}
    first = threading.Thread(
        target=lambda: answers.update(first=api.post("/v2/queues/q/messages", json=POST)),
        name="first",
    )
    first.start()
    try:
        assert stall.reserved.wait(10), "the first post reserved its dedup id"
        repeat = api.post("/v2/queues/q/messages", json=POST)
    finally:
        stall.go.set()
        first.join(10)
    assert repeat.status_code == 503
    assert repeat.json["description"] == (
        "The first post of dedup id 'job-9' may still be storing its message; retry the post later."
    )
    dead_after_s = api.driver._dedup.dead_after_ms / 1000
    assert dead_after_s - 2 <= int(repeat.headers["Retry-After"]) <= dead_after_s
    assert answers["first"].status_code == 201
    again = api.post("/v2/queues/q/messages", json=POST)
    assert again.status_code == 201
    assert again.json["resources"] == answers["first"].json["resources"]
