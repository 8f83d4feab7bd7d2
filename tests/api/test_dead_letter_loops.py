"""Dead-letter queues that lead back: a queue that is its own, and a cycle of them.

A queue whose ``_dead_letter_queue`` names itself lost every message claimed too often (moved
to itself, then deleted), and a failed push's dead letter was pushed from there, failed and
was dead-lettered again without end, one more message each time round (two subscriptions:
twice as many). Each test first shows the fault where the rule does not stand in its way,
then the outcome. The claim and push paths differ per store, so these run on each.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from testbed.receiver import receiver
from tests.helpers.api import PROJECT, Api
from tests.helpers.push import dispatching, subscribe

pytestmark = pytest.mark.store_paths

CLAIM = {"ttl": 60, "grace": 60}


def total(api: Api, queue: str) -> int:
    stats = api.get(f"/v2/queues/{queue}/stats")
    assert stats.status_code == 200, stats.text
    return int(stats.json["messages"]["total"])


def test_a_queue_cannot_be_its_own_dead_letter_queue(api: Api) -> None:
    own: dict[str, Any] = {"_dead_letter_queue": "q", "_max_claim_count": 1}
    refused = api.put("/v2/queues/q", json=own)
    assert refused.status_code == 400, refused.text
    assert refused.json["description"] == "_dead_letter_queue must name another queue."
    assert api.put("/v2/queues/q", json={"_max_claim_count": 1}).status_code == 201
    patch = [{"op": "add", "path": "/metadata/_dead_letter_queue", "value": "q"}]
    patched = api.patch(
        "/v2/queues/q",
        body=json.dumps(patch),
        headers={"Content-Type": "application/openstack-messaging-v2.0-json-patch"},
    )
    assert patched.status_code == 400, patched.text
    assert patched.json["title"] == "Invalid request body"
    assert api.get("/v2/queues/q").json["_dead_letter_queue"] is None
    assert api.put("/v2/queues/q", json={"_dead_letter_queue": "other"}).status_code == 204


def test_a_queue_an_older_release_made_its_own_dead_letter_queue_keeps_its_messages(
    api: Api,
) -> None:
    assert api.put("/v2/queues/q", json={"_max_claim_count": 1}).status_code == 201
    store = api.store("q")
    stored = store.get_metadata(PROJECT, "q") or {}
    store.set_metadata(PROJECT, "q", {**stored, "_dead_letter_queue": "q"})  # as one was left
    [mid] = api.post_messages("q", {"body": "once", "ttl": 600})
    first = api.post("/v2/queues/q/claims", json=CLAIM)
    assert first.status_code == 201 and first.json["messages"][0]["id"] == mid
    claim_id = first.json["messages"][0]["href"].split("claim_id=")[1]
    assert api.delete(f"/v2/queues/q/claims/{claim_id}").status_code == 204
    # The fault's trigger: the next claim finds it claimed too often, for "q" itself, and
    # returns nothing.
    assert api.post("/v2/queues/q/claims", json=CLAIM).status_code == 204
    assert total(api, "q") == 1, "the message was deleted"
    shown = api.get(f"/v2/queues/q/messages/{mid}")
    assert shown.status_code == 200 and shown.json["body"] == "once"


def test_a_failed_push_of_a_dead_letter_is_not_dead_lettered_again(api: Api) -> None:
    # Two queues, each the other's dead-letter queue, each with a subscriber that refuses
    # every push for good (400).
    for queue, other in (("a", "b"), ("b", "a")):
        assert api.put(f"/v2/queues/{queue}", json={"_dead_letter_queue": other}).status_code
    with receiver(statuses=[400] * 50) as hook:
        for queue in ("a", "b"):
            subscribe(api, hook, queue=queue)
        with dispatching(api) as dispatcher:
            api.post_messages("a", {"body": "job", "ttl": 600})
            assert dispatcher.run_once() == 1  # a's push fails for good
            # The fault's first step: the dead letter reached b, and b owes its push.
            assert total(api, "b") == 1
            for _ in range(4):
                dispatcher.run_once()
        assert len(hook.received) == 2, "the dead letter's push went round the cycle"
    assert (total(api, "a"), total(api, "b")) == (1, 1)
    [letter] = api.get("/v2/queues/b/messages?echo=true").json["messages"]
    assert letter["body"]["last_error"] == "HTTP 400"
