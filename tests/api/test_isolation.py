"""A project never sees or changes another project's queues, messages, claims, subscriptions
or stats.

Project A owns a queue with messages, a live claim and a subscription. Project B, using the same queue name,
message ids and claim id, tries every route; afterwards A's state is exactly as it was.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.api import HOOK, Api, other_project_calls

OTHER = {"X-Project-ID": "project-b"}


def setup_project_a(api: Api) -> dict[str, Any]:
    assert api.put("/v2/queues/shared", json={"_default_message_ttl": 300}).status_code == 201
    ids = api.post_messages("shared", *({"body": i} for i in range(4)))
    claim = api.post("/v2/queues/shared/claims?limit=2", json={"ttl": 60, "grace": 60})
    assert claim.status_code == 201
    claim_id = claim.headers["location"].rsplit("/", 1)[1]
    subscribed = api.post("/v2/queues/shared/subscriptions", json={"subscriber": HOOK})
    assert subscribed.status_code == 201
    nightly = {"cron": "0 3 * * *", "message": {"body": "a"}}
    assert api.put("/v2/queues/shared/schedules/nightly", json=nightly).status_code == 201
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
        "schedules": api.get("/v2/queues/shared/schedules").json["schedules"],
    }


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
        if path.endswith("/schedules") and method == "GET":
            assert result.json["schedules"] == []
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
