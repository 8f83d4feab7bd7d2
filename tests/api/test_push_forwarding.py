"""A queue fed by another queue's pushes (a ``post_data`` template posting to the API) gets
each message once, also when a push is sent again after its post was stored: the post takes
the push's delivery id header as the dedup id of each message that has none."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from tests.helpers.api import PROJECT, Api
from tests.helpers.push import dispatching, served

HEADER = "X-Zaqar-Delay-Delivery-Id"
Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def total(api: Api, queue: str) -> int:
    return int(api.get(f"/v2/queues/{queue}/stats").json["messages"]["total"])


def test_a_post_with_a_delivery_id_stores_each_message_once(api: Api) -> None:
    messages = {"messages": [{"body": "a"}, {"body": "b"}, {"body": "c", "dedup_id": "own"}]}
    first = api.post("/v2/queues/q/messages", json=messages, headers={HEADER: "s1:m1"})
    assert first.status_code == 201 and first.json["duplicates"] == []
    again = api.post("/v2/queues/q/messages", json=messages, headers={HEADER: "s1:m1"})
    assert again.status_code == 201, again.text
    assert again.json["resources"] == first.json["resources"]
    assert again.json["duplicates"] == first.json["resources"]
    assert total(api, "q") == 3
    # Another delivery is another post; without the header, or with one no push sends,
    # a post is stored again.
    assert api.post("/v2/queues/q/messages", json=messages, headers={HEADER: "s1:m2"}).json[
        "duplicates"
    ] == [first.json["resources"][2]]
    plain = {"messages": [{"body": "a"}]}
    for headers in ({}, {HEADER: "x" * 201}, {HEADER: "s1:m1 x"}):
        assert (
            api.post("/v2/queues/q/messages", json=plain, headers=headers).json["duplicates"] == []
        )
    assert total(api, "q") == 3 + 2 + 3


def answer_lost_once(app: Wsgi) -> tuple[Wsgi, list[int]]:
    """``app``, whose answer to the first post is replaced by a 503 once the post was served
    (its answer lost on the way back); and the statuses the app gave."""
    given: list[int] = []

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        status: list[str] = []
        body = b"".join(app(environ, lambda s, h, *a: status.append(s)))
        given.append(int(status[0].split()[0]))
        if len(given) == 1:
            start_response("503 Service Unavailable", [("Content-Type", "application/json")])
            return [b'{"title": "lost", "description": "the answer was lost"}']
        start_response(status[0], [("Content-Type", "application/json")])
        return [body]

    return wrapped, given


def test_a_push_sent_again_after_its_post_was_stored_forwards_the_message_once(
    api: Api,
) -> None:
    app, given = answer_lost_once(api.client.app)
    with served(app) as url:
        options = {
            "post_data": json.dumps({"messages": [{"body": "$zaqar_message$", "ttl": 300}]}),
            "post_headers": {"X-Project-ID": PROJECT, "Client-ID": str(uuid.uuid4())},
        }
        subscriber = f"{url}/v2/queues/dst/messages"
        created = api.post(
            "/v2/queues/src/subscriptions", json={"subscriber": subscriber, "options": options}
        )
        assert created.status_code == 201, created.text
        with dispatching(api) as dispatcher:
            api.post_messages("src", {"body": {"order": 17}, "ttl": 300})
            assert dispatcher.run_once() == 1
            # The fault: the first post was stored, and the push saw a 503 for it.
            assert given == [201] and total(api, "dst") == 1
            for _ in range(5):  # Zaqar's policy sends it again at once
                if len(given) > 1:
                    break
                dispatcher.run_once()
    assert given == [201, 201], "the push was not sent again"
    [forwarded] = api.get("/v2/queues/dst/messages?echo=true").json["messages"]
    assert forwarded["body"]["body"] == {"order": 17}
