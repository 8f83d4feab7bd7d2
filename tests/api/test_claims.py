"""Claims over HTTP: create, get, renew, release, dead-letter queue."""

from __future__ import annotations

import json

import pytest

from testbed.receiver import receiver
from tests.helpers.api import Api, assert_error
from tests.helpers.push import dispatching, subscribe

CLAIM_TTL = (
    "The TTL for a claim may not exceed 43200 seconds, and must be at least 60 seconds long."
)
CLAIM_GRACE = (
    "The grace for a claim may not exceed 43200 seconds, and must be at least 60 seconds long."
)


def claim_id_of(result: object) -> str:
    return str(result.headers["location"].rsplit("/", 1)[1])  # type: ignore[attr-defined]


def test_create_shape(api: Api) -> None:
    [mid] = api.post_messages("q", {"body": "x", "ttl": 120})
    result = api.post("/v2/queues/q/claims")
    assert result.status_code == 201
    claim_id = claim_id_of(result)
    assert result.headers["location"] == f"/v2/queues/q/claims/{claim_id}"
    [m] = result.json["messages"]
    assert m["href"] == f"/v2/queues/q/messages/{mid}?claim_id={claim_id}"
    assert m["ttl"] == 360  # message outlives the default claim (300) by the default grace (60)


def test_nothing_to_claim_is_204(api: Api) -> None:
    result = api.post("/v2/queues/nothing/claims")
    assert result.status_code == 204 and result.text == "" and "location" not in result.headers


@pytest.mark.parametrize(
    ("body", "description"),
    [
        ({"ttl": 59}, CLAIM_TTL),
        ({"ttl": 43201}, CLAIM_TTL),
        ({"grace": 59}, CLAIM_GRACE),
        ({"grace": 43201}, CLAIM_GRACE),
    ],
)
def test_ttl_and_grace_bounds(api: Api, body: dict[str, int], description: str) -> None:
    api.post_messages("q", {"body": 1})
    assert_error(
        api.post("/v2/queues/q/claims", json=body), 400, "Invalid API request", description
    )
    assert api.post("/v2/queues/q/claims", json={"ttl": 60, "grace": 43200}).status_code == 201


@pytest.mark.parametrize("body", ["[", "[]", ".", '"fail"', '{"ttl": null}', '{"grace": "60"}'])
def test_malformed_bodies(api: Api, body: str) -> None:
    api.post_messages("q", {"body": 1})
    result = api.post("/v2/queues/q/claims", body=body)
    assert result.status_code == 400, result.text
    assert api.get("/v2/queues/q/stats").json["messages"]["claimed"] == 0


@pytest.mark.parametrize(("limit", "ok"), [("0", False), ("1", True), ("20", True), ("21", False)])
def test_limit_bounds(api: Api, limit: str, ok: bool) -> None:
    api.post_messages("q", *[{"body": i} for i in range(25)])
    result = api.post("/v2/queues/q/claims", params={"limit": limit})
    if ok:
        assert len(result.json["messages"]) == int(limit)
    else:
        assert_error(
            result,
            400,
            "Invalid API request",
            "Limit must be at least 1 and may not be greater than 20.",
        )


def test_default_limit_is_10(api: Api) -> None:
    api.post_messages("q", *[{"body": i} for i in range(12)])
    assert len(api.post("/v2/queues/q/claims").json["messages"]) == 10


def test_get_renew_release(api: Api) -> None:
    api.post_messages("q", {"body": 1}, {"body": 2})
    claim_id = claim_id_of(api.post("/v2/queues/q/claims", json={"ttl": 100}))
    api.clock.advance(10)
    got = api.get(f"/v2/queues/q/claims/{claim_id}").json
    assert (got["age"], got["ttl"], got["href"]) == (10, 100, f"/v2/queues/q/claims/{claim_id}")
    assert [m["body"] for m in got["messages"]] == [1, 2]
    assert (
        api.patch(f"/v2/queues/q/claims/{claim_id}", json={"ttl": 200, "grace": 60}).status_code
        == 204
    )
    renewed = api.get(f"/v2/queues/q/claims/{claim_id}").json
    assert (renewed["age"], renewed["ttl"]) == (0, 200)
    assert api.delete(f"/v2/queues/q/claims/{claim_id}").status_code == 204
    assert api.delete(f"/v2/queues/q/claims/{claim_id}").status_code == 204
    assert_error(
        api.get(f"/v2/queues/q/claims/{claim_id}"),
        404,
        "Not found",
        f"Claim {claim_id} does not exist in queue q for project project-1",
    )
    assert len(api.post("/v2/queues/q/claims").json["messages"]) == 2


@pytest.mark.parametrize("blank", ["  ", "\n", "\t \r\n"])
def test_claim_with_a_blank_body_is_refused(api: Api, blank: str) -> None:
    api.post_messages("q", {"body": 1})
    assert_error(
        api.post("/v2/queues/q/claims", body=blank),
        400,
        "Invalid request body",
        "Request body could not be parsed.",
    )
    # Nothing was claimed: an empty body (no body at all) still claims with the defaults.
    assert api.post("/v2/queues/q/claims", body="").status_code == 201


def test_renew_errors(api: Api) -> None:
    api.post_messages("q", {"body": 1})
    claim_id = claim_id_of(api.post("/v2/queues/q/claims"))
    assert_error(
        api.patch(f"/v2/queues/q/claims/{claim_id}", body=""),
        400,
        "Invalid request body",
        "Request body could not be parsed.",
    )
    assert_error(
        api.patch(f"/v2/queues/q/claims/{claim_id}", json={"ttl": 59}),
        400,
        "Invalid API request",
        CLAIM_TTL,
    )
    assert api.patch("/v2/queues/q/claims/nope", json={"ttl": 60}).status_code == 404


def test_claim_expiry_over_http(api: Api) -> None:
    api.post_messages("q", {"body": 1})
    claim_id = claim_id_of(api.post("/v2/queues/q/claims", json={"ttl": 60}))
    api.clock.advance(60)
    assert api.get(f"/v2/queues/q/claims/{claim_id}").status_code == 404
    assert api.patch(f"/v2/queues/q/claims/{claim_id}", json={"ttl": 60}).status_code == 404
    assert api.post("/v2/queues/q/claims").status_code == 201


def test_dead_letter_queue(api: Api) -> None:
    api.put("/v2/queues/q", json={"_max_claim_count": 1, "_dead_letter_queue": "dead"})
    [mid] = api.post_messages("q", {"body": "poison"})
    first = api.post("/v2/queues/q/claims")
    api.delete(f"/v2/queues/q/claims/{claim_id_of(first)}")
    assert api.post("/v2/queues/q/claims").status_code == 204
    moved = api.get("/v2/queues/dead/messages", params={"echo": "true"}).json["messages"]
    assert [m["id"] for m in moved] == [mid]
    assert api.get("/v2/queues/q/stats").json["messages"]["total"] == 0
    assert json.loads(json.dumps(moved[0]["body"])) == "poison"


def test_a_dead_letter_moved_by_a_claim_is_pushed_to_the_dead_letter_queue_s_subscribers(
    api: Api,
) -> None:
    api.put("/v2/queues/q", json={"_max_claim_count": 1, "_dead_letter_queue": "dead"})
    with receiver() as hook, dispatching(api) as dispatcher:
        subscribe(api, hook, queue="dead")
        [mid] = api.post_messages("q", {"body": "poison"})
        first = api.post("/v2/queues/q/claims")
        api.delete(f"/v2/queues/q/claims/{claim_id_of(first)}")
        assert api.post("/v2/queues/q/claims").status_code == 204
        dispatcher.run_once()
        [push] = hook.wait_for(1)
    assert (push.json()["id"], push.json()["queue_name"]) == (mid, "dead")
