"""Subscriptions that post their queue's messages back to it, through the service's own API (a
``post_data`` template, as queue to queue forwarding does): each push carries the hops of its
message plus one (``X-Zaqar-Delay-Hops``), each post stores them, and a post past
``[transport] max_push_hops`` is refused, so the loop ends.

Before, one message posted to a queue with two such subscriptions became 19,113 messages in
8 s on a running server, doubling each round until the dispatchers could push no faster.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator

import pytest

from testbed.receiver import receiver
from tests.helpers.api import API_STORES, PROJECT, Api, api_of
from tests.helpers.push import dispatching, served, subscribe
from zaqar_delay.conf import Limits

pytestmark = pytest.mark.store_paths

MOST = 2
HOPS = "X-Zaqar-Delay-Hops"


@pytest.fixture(params=API_STORES)
def api(request: pytest.FixtureRequest) -> Iterator[Api]:
    yield from api_of(request, limits=dataclasses.replace(Limits(), max_push_hops=MOST))


def total(api: Api, queue: str) -> int:
    stats = api.get(f"/v2/queues/{queue}/stats")
    assert stats.status_code == 200, stats.text
    return int(stats.json["messages"]["total"])


def forward(api: Api, url: str, source: str, target: str, tag: str = "") -> None:
    """Subscribe ``source`` to post each of its messages to ``target`` on the API at ``url``."""
    options = {
        "post_data": json.dumps({"messages": [{"body": "$zaqar_message$", "ttl": 600}]}),
        "post_headers": {"X-Project-ID": PROJECT, "Client-ID": str(uuid.uuid4())},
    }
    subscriber = f"{url}/v2/queues/{target}/messages?via={tag}"
    created = api.post(
        f"/v2/queues/{source}/subscriptions", json={"subscriber": subscriber, "options": options}
    )
    assert created.status_code == 201, created.text


def test_a_post_past_the_most_hops_is_refused_and_stores_nothing(api: Api) -> None:
    kept = api.post(
        "/v2/queues/q/messages", json={"messages": [{"body": 1}]}, headers={HOPS: str(MOST)}
    )
    assert kept.status_code == 201, kept.text
    refused = api.post(
        "/v2/queues/q/messages", json={"messages": [{"body": 2}]}, headers={HOPS: str(MOST + 1)}
    )
    assert refused.status_code == 403, refused.text
    assert refused.json["title"] == "Push loop refused"
    assert f"counts {MOST + 1} hops" in refused.json["description"]
    for wrong in ("-1", "two", "1.5", "", "9" * 7):
        answer = api.post(
            "/v2/queues/q/messages", json={"messages": [{"body": 3}]}, headers={HOPS: wrong}
        )
        assert answer.status_code == 400, (wrong, answer.text)
        assert HOPS in answer.json["description"]
    assert total(api, "q") == 1


def test_each_message_of_a_forwarded_post_after_the_first_counts_one_hop_more(
    api: Api,
) -> None:
    """A template posting several copies per push would multiply the messages by as many each
    round: counted as that many pushes, it takes the loop no further than they would."""
    two = {"messages": [{"body": 1}, {"body": 2}]}
    assert api.post("/v2/queues/q/messages", json=two, headers={HOPS: "1"}).status_code == 201
    three = {"messages": [{"body": 1}, {"body": 2}, {"body": 3}]}
    refused = api.post("/v2/queues/q/messages", json=three, headers={HOPS: "1"})
    assert refused.status_code == 403, refused.text
    assert f"counts {MOST + 1} hops" in refused.json["description"]
    # A client's post of many messages carries no hops.
    assert api.post("/v2/queues/q/messages", json=three).status_code == 201
    assert total(api, "q") == 5


def test_a_push_carries_its_message_s_hops_plus_one(api: Api) -> None:
    with receiver() as hook, dispatching(api) as dispatcher:
        subscribe(api, hook)
        api.post("/v2/queues/q/messages", json={"messages": [{"body": "plain"}]})
        api.post(
            "/v2/queues/q/messages",
            json={"messages": [{"body": "forwarded"}]},
            headers={HOPS: str(MOST)},
        )
        dispatcher.run_once()
        pushes = hook.wait_for(2)
    assert {p.json()["body"]: p.headers[HOPS] for p in pushes} == {
        "plain": "1",
        "forwarded": str(MOST + 1),
    }


def test_subscriptions_posting_a_queue_back_to_itself_stop_after_the_most_hops(
    api: Api,
) -> None:
    with served(api.client.app) as url, dispatching(api) as dispatcher:
        forward(api, url, "q", "q", "a")
        forward(api, url, "q", "q", "b")
        api.post_messages("q", {"body": {"order": 1}, "ttl": 600})
        rounds = 0
        while dispatcher.run_once() and rounds < 20:
            rounds += 1
        assert rounds < 20, f"still pushing after {rounds} rounds: {total(api, 'q')} messages"
    # The loop happened: each message was pushed to both subscriptions and posted back,
    # until the posts of the messages MOST hops deep were refused.
    assert total(api, "q") == sum(2**hops for hops in range(MOST + 1))  # 1 + 2 + 4
    listed = api.get("/v2/queues/q/subscriptions").json["subscriptions"]
    assert {s["last_delivery"]["outcome"] for s in listed} == {"permanent"}
    assert {s["last_delivery"]["detail"] for s in listed} == {"HTTP 403"}


def test_a_cycle_through_a_dead_letter_queue_ends_too(api: Api) -> None:
    """The dead letter of a push refused for its hops keeps them: forwarded back from the
    dead-letter queue, it is refused at once, and a dead letter's push is never dead-lettered
    again."""
    assert api.put("/v2/queues/q", json={"_dead_letter_queue": "dead"}).status_code == 201
    with served(api.client.app) as url, dispatching(api) as dispatcher:
        forward(api, url, "q", "q")
        forward(api, url, "dead", "q")
        api.post_messages("q", {"body": "start", "ttl": 600})
        rounds = 0
        while dispatcher.run_once() and rounds < 20:
            rounds += 1
        assert rounds < 20, f"still pushing after {rounds} rounds"
    assert total(api, "q") == MOST + 1  # hops 0, 1 and 2
    [dead_letter] = api.get("/v2/queues/dead/messages?echo=true").json["messages"]
    assert dead_letter["body"]["last_error"] == "HTTP 403"
    # Its push back to q was refused too, and left it where it is.
    [from_dead] = api.get("/v2/queues/dead/subscriptions").json["subscriptions"]
    assert from_dead["last_delivery"]["outcome"] == "permanent"
    assert total(api, "dead") == 1
