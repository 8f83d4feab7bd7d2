"""A project never sees or changes another project's queues, messages, claims, subscriptions
or stats.

Project A owns a queue with messages, a live claim and a subscription. Project B, using the same queue name,
message ids and claim id, tries every route; afterwards A's state is exactly as it was.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.api.conftest import Api

OTHER = {"X-Project-ID": "project-b"}
PATCH_TYPE = "application/openstack-messaging-v2.0-json-patch"
HOOK = "http://127.0.0.1:9/hook"
PATCH_TTL = json.dumps([{"op": "replace", "path": "/metadata/_default_message_ttl", "value": 60}])


def setup_project_a(api: Api) -> dict[str, Any]:
    assert api.put("/v2/queues/shared", json={"_default_message_ttl": 300}).status_code == 201
    ids = api.post_messages("shared", *({"body": i} for i in range(4)))
    claim = api.post("/v2/queues/shared/claims?limit=2", json={"ttl": 60, "grace": 60})
    assert claim.status_code == 201
    claim_id = claim.headers["location"].rsplit("/", 1)[1]
    subscribed = api.post("/v2/queues/shared/subscriptions", json={"subscriber": HOOK})
    assert subscribed.status_code == 201
    return {
        "ids": ids,
        "claim_id": claim_id,
        "claimed": [m["id"] for m in claim.json["messages"]],
        "subscription_id": subscribed.json["subscription_id"],
    }


def snapshot(api: Api, a: dict[str, Any]) -> dict[str, Any]:
    """Everything project A can observe about its queue."""
    ids = ",".join(a["ids"])
    return {
        "queues": api.get("/v2/queues?detailed=true").json,
        "metadata": api.get("/v2/queues/shared").json,
        "stats": api.get("/v2/queues/shared/stats").json["messages"]["total"],
        "messages": api.get(f"/v2/queues/shared/messages?ids={ids}").json,
        "claim": api.get(f"/v2/queues/shared/claims/{a['claim_id']}").json,
        "subscriptions": api.get("/v2/queues/shared/subscriptions").json["subscriptions"],
    }


# Every route, as project B, aimed at project A's names and ids. Expected: what B sees.
def other_project_calls(a: dict[str, Any]) -> list[tuple[str, str, dict[str, Any], set[int]]]:
    mid, cid, claimed = a["ids"][2], a["claim_id"], a["claimed"][0]
    sid = a["subscription_id"]
    confirm = {"json": {"confirmed": True}}
    ids = ",".join(a["ids"])
    return [
        ("GET", "/v2/queues", {}, {200}),
        ("GET", "/v2/queues/shared", {}, {200}),  # Zaqar: a missing queue shows the defaults
        ("PATCH", "/v2/queues/shared", {"body": PATCH_TTL, "headers": {"Content-Type": PATCH_TYPE}}, {404}),
        ("GET", "/v2/queues/shared/stats", {}, {200}),
        ("POST", "/v2/queues/shared/purge", {"json": {"resource_types": ["messages"]}}, {204, 404}),
        ("GET", f"/v2/queues/shared/messages?ids={ids}", {}, {404}),
        ("GET", "/v2/queues/shared/messages?echo=true&include_claimed=true", {}, {200}),
        ("GET", f"/v2/queues/shared/messages/{mid}", {}, {404}),
        ("PATCH", f"/v2/queues/shared/messages/{mid}", {"json": {"delay": 100}}, {404}),
        ("DELETE", f"/v2/queues/shared/messages/{mid}", {}, {204}),
        ("DELETE", f"/v2/queues/shared/messages/{claimed}?claim_id={cid}", {}, {204, 400}),
        ("DELETE", f"/v2/queues/shared/messages?ids={ids}", {}, {204}),
        ("DELETE", "/v2/queues/shared/messages?pop=2", {}, {200}),
        ("POST", "/v2/queues/shared/claims?limit=10", {"json": {"ttl": 60, "grace": 60}}, {204}),
        ("GET", f"/v2/queues/shared/claims/{cid}", {}, {404}),
        ("PATCH", f"/v2/queues/shared/claims/{cid}", {"json": {"ttl": 300}}, {404}),
        ("DELETE", f"/v2/queues/shared/claims/{cid}", {}, {204}),
        ("POST", "/v2/queues/shared/share", {"json": {}}, {403}),  # no signing key here
        ("GET", "/v2/queues/shared/subscriptions", {}, {200}),
        ("GET", f"/v2/queues/shared/subscriptions/{sid}", {}, {404}),
        ("PATCH", f"/v2/queues/shared/subscriptions/{sid}", {"json": {"ttl": 120}}, {404}),
        ("PUT", f"/v2/queues/shared/subscriptions/{sid}/confirm", confirm, {404}),
        ("DELETE", f"/v2/queues/shared/subscriptions/{sid}", {}, {204}),
        ("POST", "/v2/queues/shared/purge", {"json": {"resource_types": ["subscriptions"]}}, {204}),
        # Last, since B then has a queue of that name: creating it and posting to it is B's.
        ("PUT", "/v2/queues/shared", {"json": {"_default_message_ttl": 60}}, {201}),
        ("POST", "/v2/queues/shared/messages", {"json": {"messages": [{"body": "b"}]}}, {201}),
        ("POST", "/v2/queues/shared/subscriptions", {"json": {"subscriber": HOOK}}, {201}),
        ("DELETE", "/v2/queues/shared", {}, {204}),
    ]  # fmt: skip


def test_another_project_sees_and_changes_nothing(api: Api) -> None:
    a = setup_project_a(api)
    before = snapshot(api, a)
    for method, path, kwargs, expected in other_project_calls(a):
        headers = {**OTHER, **kwargs.pop("headers", {})}
        result = api.request(method, path, headers=headers, **kwargs)
        assert result.status_code in expected, (method, path, result.status_code, result.text)
        if result.status_code == 200 and method == "GET" and "messages" in path:
            assert result.json["messages"] == [], (method, path)
        if path.endswith("/subscriptions") and method == "GET":
            assert result.json["subscriptions"] == []
        if path == "/v2/queues":
            assert result.json["queues"] == []
        if method == "PUT" and path == "/v2/queues/shared":
            assert api.get("/v2/queues/shared", headers=OTHER).json["_default_message_ttl"] == 60
        if method == "GET" and path == "/v2/queues/shared":
            assert result.json["_default_message_ttl"] != 300  # not A's metadata
        if path.endswith("/stats"):
            assert result.json["messages"]["total"] == 0
        if "pop=" in path:
            assert result.json["messages"] == []
    assert snapshot(api, a) == before


# (Surrounding spaces are not part of a header value in HTTP: "project-1 " is project-1.)
@pytest.mark.parametrize("project", ["PROJECT-1", "project-1/shared", "project-1}", "{project-1"])
def test_project_names_that_look_alike_are_different_projects(api: Api, project: str) -> None:
    a = setup_project_a(api)
    seen = api.get("/v2/queues/shared/stats", headers={"X-Project-ID": project})
    assert seen.status_code in (200, 400)
    if seen.status_code == 200:
        assert seen.json["messages"]["total"] == 0
    assert api.get("/v2/queues/shared/stats").json["messages"]["total"] == len(a["ids"])
