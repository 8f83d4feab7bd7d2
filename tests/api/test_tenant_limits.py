"""Bounds a tenant cannot pass: messages per post (and a short Location), queues per project,
subscriptions per queue and per project, and forwarded schemes and hosts that reach
``Location`` only when they are ``http``/``https`` and a host.

Each refusal is first shown to be the limit's doing: the same request within the limit (or
from a proxy that sends a valid scheme and host) succeeds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.helpers.api import Api, api_on, assert_error, pooled_api_on
from tests.helpers.oslo import HEADERS, Deployment
from zaqar_delay.conf import Limits

QUOTAS = Limits(
    max_messages_per_post=50,
    max_queues_per_project=3,
    max_subscriptions_per_queue=3,
    max_subscriptions_per_project=5,
)


@pytest.fixture(params=["embedded", "mongodb", "pooled"])
def limited(request: pytest.FixtureRequest) -> Iterator[Api]:
    if request.param == "pooled":
        yield from pooled_api_on(request, limits=QUOTAS)
    else:
        yield from api_on(request, request.param, limits=QUOTAS)


def messages(count: int) -> dict[str, Any]:
    return {"messages": [{"body": i} for i in range(count)]}


def test_a_post_holds_at_most_max_messages_per_post(limited: Api) -> None:
    assert limited.post("/v2/queues/q/messages", json=messages(50)).status_code == 201
    refused = limited.post("/v2/queues/q/messages", json=messages(51))
    assert_error(refused, 400, "Invalid API request")
    assert refused.json["description"] == "A post may hold at most 50 messages; this one holds 51."
    assert limited.get("/v2/queues/q/stats").json["messages"]["total"] == 50


def test_the_default_bound_refuses_a_post_of_23000_tiny_messages(
    request: pytest.FixtureRequest,
) -> None:
    for api in api_on(request, "embedded"):
        tiny = {"messages": [{"body": 0}] * 23_000}
        payload = json.dumps(tiny, separators=(",", ":")).encode()
        # Within the byte limit: only the count refuses it.
        assert len(payload) <= Limits().max_messages_post_size
        refused = api.post("/v2/queues/q/messages", body=payload)
        assert refused.status_code == 400, refused.status_code
        assert "at most 1000 messages" in refused.json["description"]
        assert "location" not in refused.headers
        assert api.get("/v2/queues/q/stats").json["messages"]["total"] == 0


def test_location_names_ids_up_to_a_page_and_the_collection_past_it(limited: Api) -> None:
    page = limited.post("/v2/queues/q/messages", json=messages(20))
    ids = [href.rsplit("/", 1)[1] for href in page.json["resources"]]
    assert page.headers["location"] == f"/v2/queues/q/messages?ids={','.join(ids)}"
    # The Location of a page of ids is one GET.
    assert limited.get(page.headers["location"]).status_code == 200
    more = limited.post("/v2/queues/q/messages", json=messages(21))
    assert more.status_code == 201
    assert more.headers["location"] == "/v2/queues/q/messages"
    assert len(more.json["resources"]) == 21


def test_queues_per_project(limited: Api) -> None:
    for name in ("a", "b", "c"):
        assert limited.put(f"/v2/queues/{name}").status_code == 201
    assert limited.put("/v2/queues/a").status_code == 204  # an existing one: not a new queue
    for method, path, body in (
        ("PUT", "/v2/queues/d", None),
        ("POST", "/v2/queues/d/messages", messages(1)),
        ("POST", "/v2/queues/d/subscriptions", {"subscriber": "http://127.0.0.1:9/x"}),
    ):
        refused = limited.request(method, path, json=body)
        assert_error(refused, 403, "Quota exceeded")
        assert "max_queues_per_project" in refused.json["description"]
    assert [q["name"] for q in limited.get("/v2/queues").json["queues"]] == ["a", "b", "c"]
    # Posting to an existing queue, and another project's queues, are not affected.
    assert limited.post("/v2/queues/a/messages", json=messages(1)).status_code == 201
    other = {"X-Project-ID": "other-project"}
    assert limited.put("/v2/queues/d", headers=other).status_code == 201
    assert limited.delete("/v2/queues/c").status_code == 204
    assert limited.post("/v2/queues/d/messages", json=messages(1)).status_code == 201


def subscribe(api: Api, queue: str, n: int) -> Any:
    return api.post(
        f"/v2/queues/{queue}/subscriptions", json={"subscriber": f"http://127.0.0.1:9/{n}"}
    )


def test_subscriptions_per_queue_and_per_project(limited: Api) -> None:
    for n in range(3):
        assert subscribe(limited, "a", n).status_code == 201
    refused = subscribe(limited, "a", 3)
    assert_error(refused, 403, "Quota exceeded")
    assert "max_subscriptions_per_queue" in refused.json["description"]
    # Subscribing an existing subscriber again answers as before (not a new subscription).
    assert subscribe(limited, "a", 0).status_code in (201, 409)
    assert subscribe(limited, "b", 0).status_code == 201
    assert subscribe(limited, "b", 1).status_code == 201
    refused = subscribe(limited, "b", 2)  # a's 3 and b's 2 make the project's 5
    assert_error(refused, 403, "Quota exceeded")
    assert "max_subscriptions_per_project" in refused.json["description"]
    listed = limited.get("/v2/queues/b/subscriptions").json["subscriptions"]
    assert len(listed) == 2
    sid = limited.get("/v2/queues/a/subscriptions").json["subscriptions"][0]["id"]
    assert limited.delete(f"/v2/queues/a/subscriptions/{sid}").status_code == 204
    assert subscribe(limited, "b", 2).status_code == 201


PROXIED = "[oslo_middleware]\nenable_proxy_headers_parsing = true\n"


def post_behind_proxy(service: Deployment, headers: dict[str, str]) -> Any:
    return service.client.simulate_post(
        "/v2/queues/q/messages", headers={**HEADERS, **headers}, json=messages(1)
    )


def test_forwarded_schemes_and_hosts_reach_location_only_when_valid(
    deploy: Callable[[str], Deployment],
) -> None:
    service = deploy(PROXIED)
    valid = post_behind_proxy(service, {"Forwarded": "proto=https;host=queues.example.com"})
    assert valid.status_code == 201
    assert valid.headers["location"].startswith("https://queues.example.com/v2/queues/q/")
    for headers in (
        {"Forwarded": "proto=javascript;host=evil.example"},
        {"Forwarded": 'proto=https;host="evil.example/x"'},
        {"Forwarded": 'proto=https;host="a b"'},
        {"X-Forwarded-Proto": "javascript"},
        {"X-Forwarded-Host": "evil.example/<script>"},
    ):
        refused = post_behind_proxy(service, headers)
        assert refused.status_code == 400, (headers, refused.status_code)
        assert set(refused.json) == {"title", "description"}
        assert "javascript" not in refused.headers.get("location", "")
