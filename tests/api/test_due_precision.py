"""Never early to the microsecond: due times from a post that arrives inside a millisecond.

The fake clock stands between two whole milliseconds; every way of reading messages must hide
a delayed one until its post's arrival plus its delay, however the instants are rounded.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.api import Api

DELAY_S = 2


def visible(api: Api) -> dict[str, Any]:
    """What each reading route returns right now (no side effect on the delayed message)."""
    listed = api.get("/v2/queues/q/messages", params={"echo": "true"}).json["messages"]
    stats = api.get("/v2/queues/q/stats").json["messages"]
    return {"listed": len(listed), "delayed": stats["delayed"]}


def claim_status(api: Api) -> int:
    return api.post("/v2/queues/q/claims", json={"ttl": 60, "grace": 60}).status_code


def pop_count(api: Api) -> int:
    return len(api.delete("/v2/queues/q/messages", params={"pop": "1"}).json["messages"])


@pytest.mark.parametrize("arrival_us", [1, 300, 999])
@pytest.mark.parametrize("how", ["queue_default", "message_delay", "reschedule"])
def test_not_due_one_microsecond_before_arrival_plus_delay(
    api: Api, arrival_us: int, how: str
) -> None:
    api.put("/v2/queues/q", json={"_default_message_delay": DELAY_S})
    api.clock.advance(us=arrival_us)  # the post arrives inside a millisecond
    arrival_ns = api.clock.now_ns()
    if how == "queue_default":
        [mid] = api.post_messages("q", {"body": "x"})
    elif how == "message_delay":
        [mid] = api.post_messages("q", {"body": "x", "delay": DELAY_S})
    else:
        [mid] = api.post_messages("q", {"body": "x", "delay": 0})
        result = api.patch(f"/v2/queues/q/messages/{mid}", json={"delay": DELAY_S})
        assert result.status_code == 204, result.text
    due_ns = arrival_ns + DELAY_S * 1_000_000_000

    # One microsecond before arrival + delay: hidden from every reading route.
    api.clock.advance(us=(due_ns - api.clock.now_ns()) // 1000 - 1)
    assert api.clock.now_ns() == due_ns - 1000
    assert visible(api) == {"listed": 0, "delayed": 1}
    assert claim_status(api) == 204
    assert pop_count(api) == 0
    waited = api.post("/v2/queues/q/claims", params={"wait": "0"}, json={"ttl": 60})
    assert waited.status_code == 204

    # At the next whole millisecond it is due, at most one millisecond late.
    next_ms_ns = -(-due_ns // 1_000_000) * 1_000_000
    api.clock.advance(us=(next_ms_ns - api.clock.now_ns()) // 1000)
    assert 0 <= api.clock.now_ns() - due_ns < 1_000_000
    assert visible(api) == {"listed": 1, "delayed": 0}
    assert pop_count(api) == 1


def test_a_post_on_a_whole_millisecond_is_due_exactly(api: Api) -> None:
    api.put("/v2/queues/q", json={"_default_message_delay": DELAY_S})
    api.post_messages("q", {"body": "x"})
    api.clock.advance(DELAY_S, ms=-1)
    assert claim_status(api) == 204
    api.clock.advance(ms=1)
    assert claim_status(api) == 201


def test_deliver_at_is_exact_and_not_rounded(api: Api) -> None:
    api.clock.advance(us=500)
    due_ms = api.clock.now_ms() + 1500
    api.post_messages("q", {"body": "x", "deliver_at": due_ms})
    api.clock.advance(us=(due_ms * 1000 - api.clock.now_ns() // 1000) - 1)
    assert claim_status(api) == 204
    api.clock.advance(us=1)
    assert api.clock.now_ms() == due_ms
    assert claim_status(api) == 201
