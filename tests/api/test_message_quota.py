"""A project holds at most ``[transport] max_messages_per_project`` messages: a post past it
answers 403 and stores nothing, other projects post on, and room made by consuming, deleting
or expiry is usable once the project is counted again.

Each refusal is first shown to be the limit's doing: the project posted up to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import falcon.testing
import pytest

from tests.helpers.api import (
    API_STORES,
    HEADERS,
    Api,
    api_of,
    api_on,
    assert_error,
    pooled_api_on,
)
from tests.helpers.pool_faults import placed_on_a_stopped_pool
from tests.helpers.push import dispatching
from zaqar_delay.conf import Limits
from zaqar_delay.message_quota import RECOUNT_AT_MOST_EVERY_MS

MOST = 10
LIMITS = Limits(max_messages_per_project=MOST)
OTHER = {**HEADERS, "X-Project-ID": "project-2"}


@pytest.fixture(params=API_STORES)
def limited(request: pytest.FixtureRequest) -> Iterator[Api]:
    yield from api_of(request, limits=LIMITS)


def post(api: Api, queue: str, count: int, **kwargs: Any) -> falcon.testing.Result:
    body = {"messages": [{"body": n, "ttl": 60} for n in range(count)]}
    return api.post(f"/v2/queues/{queue}/messages", json=body, **kwargs)


def totals(api: Api, *queues: str) -> list[int]:
    return [api.get(f"/v2/queues/{q}/stats").json["messages"]["total"] for q in queues]


def test_a_post_past_the_project_s_limit_is_refused_whole(limited: Api) -> None:
    assert post(limited, "one", 6).status_code == 201
    assert post(limited, "two", 3).status_code == 201
    refused = post(limited, "one", 2)
    assert_error(refused, 403, "Quota exceeded")
    assert "max_messages_per_project" in refused.json["description"]
    assert totals(limited, "one", "two") == [6, 3]
    assert post(limited, "two", 1).status_code == 201
    assert_error(post(limited, "three", 1), 403, "Quota exceeded")
    # Another project has a limit of its own.
    assert post(limited, "one", MOST, headers=OTHER).status_code == 201


def test_a_retry_of_a_stored_post_at_the_limit_answers_as_the_first_did(limited: Api) -> None:
    """A post whose every message repeats a remembered dedup id stores nothing: past the
    limit it is answered all the same, so a producer that never saw the first answer learns
    its ids; one new id in it has the post refused."""
    body = {"messages": [{"body": n, "ttl": 60, "dedup_id": f"job-{n}"} for n in range(MOST)]}
    first = limited.post("/v2/queues/q/messages", json=body)
    assert first.status_code == 201, first.text
    assert_error(post(limited, "q", 1), 403, "Quota exceeded")  # the limit is reached
    again = limited.post("/v2/queues/q/messages", json=body)
    assert again.status_code == 201, again.text
    assert again.json["resources"] == first.json["resources"]
    assert again.json["duplicates"] == first.json["resources"]
    body["messages"].append({"body": "new", "ttl": 60, "dedup_id": "job-new"})
    assert_error(limited.post("/v2/queues/q/messages", json=body), 403, "Quota exceeded")
    assert totals(limited, "q") == [MOST]


def test_room_made_by_deleting_is_usable_once_the_project_is_counted_again(
    limited: Api,
) -> None:
    assert post(limited, "q", MOST).status_code == 201
    listed = limited.get("/v2/queues/q/messages?echo=true&limit=3").json["messages"]
    ids = ",".join(m["id"] for m in listed)
    assert limited.delete(f"/v2/queues/q/messages?ids={ids}").status_code == 204
    assert totals(limited, "q") == [MOST - 3]
    # Within a second of its last count, a project at its limit is refused on that count.
    assert_error(post(limited, "q", 3), 403, "Quota exceeded")
    limited.clock.advance(ms=RECOUNT_AT_MOST_EVERY_MS)
    assert post(limited, "q", 3).status_code == 201
    assert_error(post(limited, "q", 1), 403, "Quota exceeded")


def test_messages_a_post_did_not_store_leave_room_at_once(limited: Api) -> None:
    """An invalid post, and a repeat of dedup ids, store nothing: the messages they were
    admitted for are given back, so the next post is not refused for them (the clock stands
    still: no count is made again)."""
    assert post(limited, "q", 5).status_code == 201
    invalid = {"messages": [{"body": n, "ttl": 60} for n in range(3)] + [{"ttl": 60}]}
    assert_error(limited.post("/v2/queues/q/messages", json=invalid), 400, "Invalid request body")
    remembered = {"messages": [{"body": "job", "ttl": 60, "dedup_id": "job"}]}
    assert limited.post("/v2/queues/q/messages", json=remembered).status_code == 201
    for _ in range(3):
        repeat = limited.post("/v2/queues/q/messages", json=remembered)
        assert repeat.status_code == 201 and repeat.json["duplicates"], repeat.text
    assert post(limited, "q", 4).status_code == 201
    assert_error(post(limited, "q", 1), 403, "Quota exceeded")
    assert totals(limited, "q") == [MOST]


def test_expired_messages_leave_room(limited: Api) -> None:
    assert post(limited, "q", MOST).status_code == 201
    assert_error(post(limited, "q", 1), 403, "Quota exceeded")
    limited.clock.advance(61)
    assert post(limited, "q", MOST).status_code == 201


@pytest.fixture
def pooled(request: pytest.FixtureRequest) -> Iterator[Api]:
    yield from pooled_api_on(request, limits=LIMITS)


def test_a_pool_away_counts_none_of_its_messages(pooled: Api) -> None:
    """Counting a project's messages asks each pool: one that does not answer counts none,
    so the project's posts to queues on the others go on."""

    def place() -> None:
        assert post(pooled, "away", 4).status_code == 201
        assert pooled.service.stores.pool_of("project-1", "away") == "gone"

    with placed_on_a_stopped_pool(pooled, place):
        pooled.clock.advance(ms=RECOUNT_AT_MOST_EVERY_MS)
        # With "away"'s 4 counted, 7 more would pass the limit of 10.
        assert post(pooled, "here", 7).status_code == 201
        assert pooled.service.stores.pool_of("project-1", "here") == "redis"
        assert totals(pooled, "here") == [7]
        assert_error(post(pooled, "here", 4), 403, "Quota exceeded")


def test_a_refused_post_of_dedup_ids_to_a_new_queue_places_no_queue(pooled: Api) -> None:
    """Asking whether a post only repeats remembered ids reads where the queue lives: it
    does not place a queue the refused post would have created."""
    assert post(pooled, "q", MOST).status_code == 201
    body = {"messages": [{"body": 1, "ttl": 60, "dedup_id": "job-1"}]}
    assert_error(pooled.post("/v2/queues/fresh/messages", json=body), 403, "Quota exceeded")
    assert pooled.service.stores.pool_of("project-1", "fresh") is None
    listed = pooled.get("/v2/queues").json["queues"]
    assert [q["name"] for q in listed] == ["q"]


def test_posting_with_fresh_dedup_ids_and_deleting_at_once_meets_the_limit(
    limited: Api, request: pytest.FixtureRequest
) -> None:
    """On Redis and MongoDB each remembered id counts until its message would expire,
    deleted or not."""
    if request.node.callspec.params["limited"] == "swift":
        pytest.skip("Swift counts messages alone (its dedup records outlive them)")
    for n in range(MOST):
        body = {"messages": [{"body": n, "ttl": 60, "dedup_id": f"id-{n}"}]}
        posted = limited.post("/v2/queues/q/messages", json=body)
        assert posted.status_code == 201, posted.text
        assert limited.delete(posted.json["resources"][0]).status_code == 204
    assert totals(limited, "q") == [0]
    limited.clock.advance(ms=RECOUNT_AT_MOST_EVERY_MS)
    again = {"messages": [{"body": "more", "ttl": 60, "dedup_id": "id-more"}]}
    assert_error(limited.post("/v2/queues/q/messages", json=again), 403, "Quota exceeded")
    limited.clock.advance(61)  # the ids lapse
    assert limited.post("/v2/queues/q/messages", json=again).status_code == 201


def test_a_schedule_s_ticks_take_none_of_the_project_s_quota(
    request: pytest.FixtureRequest,
) -> None:
    """A schedule firing every second for 200 s, its messages living a minute (so the queue
    holds at most 60, and remembers as many of their dedup ids): its ticks (each remembered
    an hour by its dedup id) take none of a quota of 150, so every slot fires and the project
    posts on. They did take it: after about 130 fires the schedule's own fires were refused,
    as was every post of the project."""
    [api] = api_on(request, "embedded", limits=Limits(max_messages_per_project=150))
    every_second = {"every": 1, "message": {"body": "tick", "ttl": 60}}
    assert api.put("/v2/queues/q/schedules/s", json=every_second).status_code == 201
    with dispatching(api) as dispatcher:
        for _ in range(200):
            api.clock.advance(ms=1000)
            dispatcher.run_once()
    shown = api.get("/v2/queues/q/schedules/s").json
    assert shown["fires"] == 200
    assert post(api, "other", 1).status_code == 201
