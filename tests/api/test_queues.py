"""Queues over HTTP: create, metadata, patch, list, delete, stats, purge."""

from __future__ import annotations

import json

import pytest

from tests.helpers.api import Api, assert_error
from zaqar_delay.api import views

PATCH = {"Content-Type": "application/openstack-messaging-v2.0-json-patch"}
DEFAULTS = {
    "_max_messages_post_size": 262144,
    "_default_message_ttl": 3600,
    "_default_message_delay": 0,
    "_dead_letter_queue": None,
    "_dead_letter_queue_messages_ttl": None,
    "_max_claim_count": None,
    "_enable_encrypt_messages": False,
}


def test_put_creates_then_ignores_metadata(api: Api) -> None:
    first = api.put("/v2/queues/q", json={"color": "red"})
    assert first.status_code == 201 and first.headers["location"] == "/v2/queues/q"
    second = api.put("/v2/queues/q", json={"color": "blue"})
    assert second.status_code == 204 and second.headers["location"] == "/v2/queues/q"
    assert api.get("/v2/queues/q").json == {**DEFAULTS, "color": "red"}


def test_get_missing_queue_shows_defaults(api: Api) -> None:
    result = api.get("/v2/queues/never")
    assert result.status_code == 200 and result.json == DEFAULTS


@pytest.mark.parametrize(
    ("body", "description"),
    [
        ("[1, 2]", "Document type not supported."),
        ("{", "Request body could not be parsed."),
        ('"text"', "Document type not supported."),
        (b"\xff\xfe", "Request body could not be parsed."),
        ("[" * 30000 + "]" * 30000, "Request body could not be parsed."),
        # Parsed, but too deep to decode again later deeper in the stack (a post to the queue
        # answered 500 under gunicorn).
        (
            '{"a": ' + "[" * 512 + "]" * 512 + "}",
            "Request body could not be parsed: it nests more than 512 levels deep.",
        ),
        ('{"a": NaN}', "Request body could not be parsed."),
        # Beyond a float: it would be stored and answered as Infinity, which is not JSON.
        ('{"a": 1e400}', "Request body could not be parsed."),
        ('{"a": [-1.5e999]}', "Request body could not be parsed."),
        # Zaqar: white space is a body that cannot be parsed, not an absent one.
        ("  ", "Request body could not be parsed."),
        ("\n", "Request body could not be parsed."),
    ],
)
def test_put_bad_bodies(api: Api, body: str | bytes, description: str) -> None:
    result = api.put("/v2/queues/q", body=body)
    assert result.status_code == 400
    assert result.json["description"] == description
    assert api.get("/v2/queues").json["queues"] == []


def test_documents_nesting_512_levels_are_taken_everywhere(api: Api) -> None:
    deepest = "[" * 511 + "]" * 511  # 512 levels with the metadata object around it
    assert api.put("/v2/queues/q", body='{"a": ' + deepest + "}").status_code == 201
    posted = api.post("/v2/queues/q/messages", body='{"messages": [{"body": 1}]}')
    assert posted.status_code == 201, posted.text
    options = "[" * 510 + "]" * 510  # the document and its options hold it 2 levels deep
    subscription = '{"subscriber": "http://127.0.0.1:9/x", "options": {"a": ' + options + "}}"
    assert api.post("/v2/queues/q/subscriptions", body=subscription).status_code == 201
    assert api.get("/v2/queues?detailed=true").status_code == 200
    claimed = api.post("/v2/queues/q/claims", json={"ttl": 60, "grace": 60})
    assert claimed.status_code == 201 and claimed.json["messages"][0]["body"] == 1
    body = "[" * 508 + "]" * 508  # the messages document holds it 4 levels deep
    deep = api.post("/v2/queues/q/messages", body='{"messages": [{"body": ' + body + "}]}")
    assert deep.status_code == 201, deep.text


def test_metadata_size_boundary(api: Api) -> None:
    padding = 65536 - len(json.dumps({"k": ""}))
    exact = json.dumps({"k": "x" * padding})
    assert len(exact) == 65536
    assert api.put("/v2/queues/ok", body=exact).status_code == 201
    over = json.dumps({"k": "x" * (padding + 1)})
    assert_error(
        api.put("/v2/queues/big", body=over),
        400,
        "Invalid API request",
        "Queue metadata is too large. Max size: 65536",
    )


@pytest.mark.parametrize(
    ("metadata", "description"),
    [
        (
            {"_default_message_ttl": 59},
            "_default_message_ttl can not exceed 1209600 seconds, and must be at least 60 seconds long.",
        ),
        (
            {"_default_message_ttl": 1209601},
            "_default_message_ttl can not exceed 1209600 seconds, and must be at least 60 seconds long.",
        ),
        ({"_default_message_ttl": "60"}, "_default_message_ttl must be integer."),
        ({"_default_message_ttl": ""}, "_default_message_ttl must be integer."),
        (
            {"_max_messages_post_size": 0},
            "_max_messages_post_size can not exceed 262144,  and must be at least greater than 0.",
        ),
        (
            {"_max_messages_post_size": 262145},
            "_max_messages_post_size can not exceed 262144,  and must be at least greater than 0.",
        ),
        (
            {"_default_message_delay": -1},
            "The TTL can not exceed 900 seconds, and must be at least 0 seconds long.",
        ),
        (
            {"_default_message_delay": 901},
            "The TTL can not exceed 900 seconds, and must be at least 0 seconds long.",
        ),
        ({"_default_message_delay": True}, "_default_message_delay must be integer."),
        ({"_default_message_delay": []}, "_default_message_delay must be integer."),
        ({"_max_claim_count": "3"}, "_max_claim_count must be integer."),
        (
            {"_dead_letter_queue_messages_ttl": 59},
            "The TTL for a message may not exceed 1209600 seconds, and must be at least 60 seconds long.",
        ),
        ({"_dead_letter_queue": "bad name"}, "_dead_letter_queue must be the name of a queue."),
        ({"_enable_encrypt_messages": "yes"}, "_enable_encrypt_messages must be boolean."),
        (
            {"_retry_backoff": 5},
            "_retry_backoff must be an object with the numbers initial, factor and max.",
        ),
        (
            {"_retry_backoff": {"initial": 1, "factor": 2}},
            "_retry_backoff must be an object with the numbers initial, factor and max.",
        ),
        (
            {"_retry_backoff": {"initial": 1, "factor": 2, "max": 5, "x": 1}},
            "_retry_backoff must be an object with the numbers initial, factor and max.",
        ),
        (
            {"_retry_backoff": {"initial": "1", "factor": 2, "max": 5}},
            "_retry_backoff must be an object with the numbers initial, factor and max.",
        ),
        (
            {"_retry_backoff": {"initial": 0, "factor": 2, "max": 5}},
            "_retry_backoff needs 0 < initial <= max <= 900 seconds.",
        ),
        (
            {"_retry_backoff": {"initial": 6, "factor": 2, "max": 5}},
            "_retry_backoff needs 0 < initial <= max <= 900 seconds.",
        ),
        (
            {"_retry_backoff": {"initial": 1, "factor": 2, "max": 901}},
            "_retry_backoff needs 0 < initial <= max <= 900 seconds.",
        ),
        (
            {"_retry_backoff": {"initial": 1, "factor": 0.5, "max": 5}},
            "_retry_backoff factor must be at least 1 and at most 1000.",
        ),
    ],
)
def test_reserved_metadata_validation(
    api: Api, metadata: dict[str, object], description: str
) -> None:
    assert_error(api.put("/v2/queues/q", json=metadata), 400, "Invalid API request", description)
    assert api.get("/v2/queues").json["queues"] == []


@pytest.mark.parametrize(
    "metadata",
    [
        {"_default_message_ttl": 60},
        {"_default_message_ttl": 1209600},
        {"_max_messages_post_size": 1},
        {"_max_messages_post_size": 262144},
        {"_default_message_delay": 0},
        {"_default_message_delay": 900},
        {"_dead_letter_queue_messages_ttl": 60},
        {"_dead_letter_queue": None, "_max_claim_count": None},
        {"_retry_backoff": {"initial": 0.5, "factor": 1, "max": 900}},
        {"_retry_backoff": None},
    ],
)
def test_reserved_metadata_boundaries_accepted(api: Api, metadata: dict[str, object]) -> None:
    assert api.put("/v2/queues/q", json=metadata).status_code == 201


class TestPatch:
    def test_add_replace_remove(self, api: Api) -> None:
        api.put("/v2/queues/q", json={"a": 1, "b": 2})
        ops = [
            {"op": "add", "path": "/metadata/c", "value": 3},
            {"op": "replace", "path": "/metadata/a", "value": 10},
            {"op": "remove", "path": "/metadata/b"},
            {"op": "replace", "path": "/metadata/_default_message_delay", "value": 30},
            {"op": "remove", "path": "/metadata/_max_claim_count"},
        ]
        result = api.patch("/v2/queues/q", body=json.dumps(ops), headers=PATCH)
        assert result.status_code == 200
        assert result.json == {**DEFAULTS, "a": 10, "c": 3, "_default_message_delay": 30}
        assert api.get("/v2/queues/q").json == result.json

    def test_wrong_media_type(self, api: Api) -> None:
        api.put("/v2/queues/q")
        result = api.patch("/v2/queues/q", json=[], headers={"Content-Type": "application/json"})
        assert result.status_code == 415

    def test_missing_queue(self, api: Api) -> None:
        ops = [{"op": "add", "path": "/metadata/a", "value": 1}]
        assert_error(
            api.patch("/v2/queues/nope", body=json.dumps(ops), headers=PATCH),
            404,
            "Not found",
            "Queue nope does not exist for project project-1",
        )

    @pytest.mark.parametrize(
        ("ops", "status", "description"),
        [
            (
                [{"op": "replace", "path": "/metadata/nokey", "value": 1}],
                409,
                "Can't replace non-existent object nokey.",
            ),
            (
                [{"op": "remove", "path": "/metadata/nokey"}],
                409,
                "Can't remove non-existent object nokey.",
            ),
            (
                [{"op": "move", "path": "/metadata/a"}],
                400,
                "Invalid operation: `move`. It must be one of the following: add, remove, replace.",
            ),
            (
                [{"path": "/metadata/a"}],
                400,
                "Unable to find `op` in JSON Schema change. It must be one of the following: add, remove, replace.",
            ),
            ([{"op": "add", "value": 1}], 400, "Unable to find 'path' in JSON Schema change"),
            (
                [{"op": "add", "path": "/a", "value": 1}],
                400,
                "Invalid JSON pointer for this resource: '/a', e.g /metadata/key",
            ),
            (
                [{"op": "add", "path": "/other/a", "value": 1}],
                400,
                "The root of path must be metadata, e.g /metadata/key.",
            ),
            (
                [{"op": "add", "path": "/metadata/a"}],
                400,
                'Operation "add" requires a member named "value".',
            ),
            ([1], 400, "Operations must be JSON objects."),
            ({"op": "add"}, 400, "Request body must be a JSON array of operation objects."),
            (
                [{"op": "add", "path": "/metadata/_default_message_delay", "value": 901}],
                400,
                "The TTL can not exceed 900 seconds, and must be at least 0 seconds long.",
            ),
        ],
    )
    def test_errors_leave_metadata_unchanged(
        self, api: Api, ops: object, status: int, description: str
    ) -> None:
        api.put("/v2/queues/q", json={"a": 1})
        result = api.patch("/v2/queues/q", body=json.dumps(ops), headers=PATCH)
        assert result.status_code == status, result.text
        assert result.json["description"] == description
        assert api.get("/v2/queues/q").json == {**DEFAULTS, "a": 1}

    def test_a_number_beyond_a_float_leaves_metadata_unchanged(self, api: Api) -> None:
        api.put("/v2/queues/q", json={"a": 1})
        ops = '[{"op": "add", "path": "/metadata/a", "value": 1e400}]'
        assert_error(
            api.patch("/v2/queues/q", body=ops, headers=PATCH),
            400,
            "Invalid request body",
            "Request body could not be parsed.",
        )
        assert api.get("/v2/queues/q").json == {**DEFAULTS, "a": 1}

    def test_empty_body(self, api: Api) -> None:
        api.put("/v2/queues/q")
        assert_error(
            api.patch("/v2/queues/q", body="", headers=PATCH),
            400,
            "Invalid request body",
            "PATCH body could not be empty for update.",
        )


class TestList:
    def test_paging_links_and_count(self, api: Api) -> None:
        for name in ("q3", "q1", "q2"):
            api.put(f"/v2/queues/{name}", json={"n": name})
        first = api.get("/v2/queues", params={"limit": 2, "with_count": "true"})
        assert [q["name"] for q in first.json["queues"]] == ["q1", "q2"]
        assert first.json["count"] == 3
        assert first.json["queues"][0] == {"name": "q1", "href": "/v2/queues/q1"}
        [link] = first.json["links"]
        assert link["rel"] == "next"
        second = api.get(link["href"].split("?")[0], query_string=link["href"].split("?")[1])
        assert [q["name"] for q in second.json["queues"]] == ["q3"]
        third = api.get("/v2/queues", params={"marker": "q3"})
        assert third.json == {"queues": [], "links": []}

    def test_detailed_and_zero_count_omitted(self, api: Api) -> None:
        assert "count" not in api.get("/v2/queues", params={"with_count": "true"}).json
        api.put("/v2/queues/q", json={"n": 1})
        [entry] = api.get("/v2/queues", params={"detailed": "true"}).json["queues"]
        assert entry["metadata"] == {**DEFAULTS, "n": 1}

    @pytest.mark.parametrize("limit", ["0", "21", "-1"])
    def test_limit_bounds(self, api: Api, limit: str) -> None:
        assert_error(
            api.get("/v2/queues", params={"limit": limit}),
            400,
            "Invalid API request",
            "Limit must be at least 1 and no greater than 20.",
        )

    def test_limit_upper_boundary_accepted(self, api: Api) -> None:
        assert api.get("/v2/queues", params={"limit": "20"}).status_code == 200
        assert api.get("/v2/queues", params={"limit": "x"}).status_code == 400

    def test_projects_are_isolated(self, api: Api) -> None:
        api.put("/v2/queues/mine")
        other = api.get("/v2/queues", headers={"X-Project-ID": "someone-else"})
        assert other.json["queues"] == []


def test_delete_queue(api: Api) -> None:
    api.post_messages("q", {"body": 1})
    assert api.delete("/v2/queues/q").status_code == 204
    assert api.delete("/v2/queues/q").status_code == 204
    assert api.get("/v2/queues").json["queues"] == []
    assert api.get("/v2/queues/q/stats").json == {
        "messages": {"claimed": 0, "free": 0, "total": 0, "delayed": 0}
    }


def test_stats_shape(api: Api) -> None:
    api.put("/v2/queues/q", json={"_default_message_delay": 60})
    ids = api.post_messages("q", {"body": 1}, {"body": 2})
    api.clock.advance(5)
    stats = api.get("/v2/queues/q/stats").json["messages"]
    assert (stats["claimed"], stats["free"], stats["total"]) == (0, 2, 2)
    assert stats["oldest"] == {
        "age": 5,
        "created": stats["oldest"]["created"],
        "href": f"/v2/queues/q/messages/{ids[0]}",
    }
    assert stats["oldest"]["created"].endswith("Z")
    assert stats["delayed"] == 2
    assert stats["next_due"] == views.timestamp_ms(api.clock.now_ms() - 5000 + 60_000)
    assert stats["newest"]["href"] == f"/v2/queues/q/messages/{ids[1]}"


class TestPurge:
    def test_purge_everything(self, api: Api) -> None:
        api.put("/v2/queues/q", json={"_default_message_delay": 60, "keep": True})
        api.post_messages("q", {"body": 1}, {"body": 2, "delay": 0})
        api.post("/v2/queues/q/claims")
        assert api.post("/v2/queues/q/purge").status_code == 204
        assert api.get("/v2/queues/q/stats").json["messages"]["total"] == 0
        assert api.get("/v2/queues/q").json["keep"] is True

    def test_resource_types(self, api: Api) -> None:
        api.post_messages("q", {"body": 1})
        assert (
            api.post("/v2/queues/q/purge", json={"resource_types": ["subscriptions"]}).status_code
            == 204
        )
        assert api.get("/v2/queues/q/stats").json["messages"]["total"] == 1
        assert_error(
            api.post("/v2/queues/q/purge", json={}),
            400,
            "Invalid API request",
            'Post body must contain key "resource_types".',
        )
        assert_error(
            api.post("/v2/queues/q/purge", json={"resource_types": ["bogus"]}),
            400,
            "Invalid API request",
            "Resource types must be a sub set of {'messages', 'subscriptions'}.",
        )
        assert (
            api.post("/v2/queues/q/purge", json={"resource_types": ["messages"]}).status_code == 204
        )
        assert api.get("/v2/queues/q/stats").json["messages"]["total"] == 0
