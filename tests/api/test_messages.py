"""Messages over HTTP: post, list, get, bulk get, delete, bulk delete, pop."""

from __future__ import annotations

import json

import pytest

from tests.helpers.api import OTHER_CLIENT_ID, Api, assert_error

TTL_RANGE = (
    "The TTL for a message may not exceed 1209600 seconds, and must be at least 60 seconds long."
)
DELAY_RANGE = (
    "The Delay TTL for a message may not exceed 900 seconds,and must be at least 0 seconds long."
)


def stored_total(api: Api, queue: str = "q") -> int:
    return int(api.get(f"/v2/queues/{queue}/stats").json["messages"]["total"])


class TestPost:
    def test_created_in_order_with_location(self, api: Api) -> None:
        result = api.post(
            "/v2/queues/q/messages", json={"messages": [{"body": i} for i in range(3)]}
        )
        assert result.status_code == 201
        hrefs = result.json["resources"]
        ids = [h.rsplit("/", 1)[1] for h in hrefs]
        assert hrefs == [f"/v2/queues/q/messages/{i}" for i in ids]
        assert result.headers["location"] == "/v2/queues/q/messages?ids=" + ",".join(ids)
        got = api.get("/v2/queues/q/messages", params={"ids": ",".join(ids)}).json["messages"]
        assert [m["body"] for m in got] == [0, 1, 2]
        assert api.get("/v2/queues").json["queues"][0]["name"] == "q"

    def test_bodies_json_allows_round_trip(self, api: Api) -> None:
        # Integers past 64 bits, escaped lone surrogates and non-ASCII text are valid JSON
        # (and accepted by Zaqar); they come back as they went in.
        raw = '{"messages": [{"body": {"big": 123456789012345678901234567890, '
        raw += '"lone": "\\ud800", "text": "d\u00e9j\u00e0 \u2713", "neg": -1e-7}}]}'
        result = api.post("/v2/queues/q/messages", body=raw)
        assert result.status_code == 201, result.text
        mid = result.json["resources"][0].rsplit("/", 1)[1]
        got = api.get(f"/v2/queues/q/messages/{mid}")
        assert got.status_code == 200
        assert json.loads(got.text)["body"] == json.loads(raw)["messages"][0]["body"]

    def test_size_boundary(self, api: Api) -> None:
        envelope = json.dumps({"messages": [{"body": ""}]})
        exact = envelope.replace('""', '"' + "x" * (262144 - len(envelope)) + '"')
        assert len(exact) == 262144
        assert api.post("/v2/queues/q/messages", body=exact).status_code == 201
        over = envelope.replace('""', '"' + "x" * (262145 - len(envelope)) + '"')
        assert_error(
            api.post("/v2/queues/q/messages", body=over),
            400,
            "Invalid API request",
            "Message collection size is too large. Max size 262144",
        )

    def test_oversized_body_is_refused_before_it_is_parsed(self, api: Api) -> None:
        # Not JSON at all, but too large: the size answer proves the body was never parsed.
        assert_error(
            api.post("/v2/queues/q/messages", body=b"\xff{" * 150000),
            400,
            "Invalid API request",
            "Message collection size is too large. Max size 262144",
        )
        assert stored_total(api) == 0

    def test_queue_size_limit(self, api: Api) -> None:
        api.put("/v2/queues/q", json={"_max_messages_post_size": 100})
        body = json.dumps({"messages": [{"body": "x" * 100}]})
        result = api.post("/v2/queues/q/messages", body=body)
        assert result.status_code == 400
        assert "The max size for current queue is 100" in result.json["description"]
        assert stored_total(api) == 0

    @pytest.mark.parametrize(
        ("document", "title", "description"),
        [
            ([{"body": 1}], "Invalid API request", "No messages were found in the request body."),
            ({"body": 1}, "Invalid API request", "No messages were found in the request body."),
            ({"messages": {"body": 1}}, "Invalid request body", "Document type not supported."),
            ({"messages": []}, "Invalid API request", "No messages to enqueu."),
            ({"messages": [1]}, "Invalid request body", "Document type not supported."),
            ({"messages": [{"ttl": 60}]}, "Invalid request body", 'Missing "body" field.'),
            ({"messages": [{"body": 1, "ttl": 59}]}, "Invalid API request", TTL_RANGE),
            ({"messages": [{"body": 1, "ttl": 1209601}]}, "Invalid API request", TTL_RANGE),
            (
                {"messages": [{"body": 1, "ttl": "60"}]},
                "Invalid request body",
                'The value of the "ttl" field must be a int.',
            ),
            (
                {"messages": [{"body": 1, "ttl": 60.5}]},
                "Invalid request body",
                'The value of the "ttl" field must be a int.',
            ),
            (
                {"messages": [{"body": 1, "ttl": None}]},
                "Invalid request body",
                'The value of the "ttl" field must be a int.',
            ),
            (
                {"messages": [{"body": 1, "ttl": 2**63}]},
                "Invalid request body",
                "JSON contains integer that is too large.",
            ),
            ({"messages": [{"body": 1}, {"body": 2, "ttl": 1}]}, "Invalid API request", TTL_RANGE),
        ],
    )
    def test_invalid_posts_store_nothing(
        self, api: Api, document: object, title: str, description: str
    ) -> None:
        assert_error(api.post("/v2/queues/q/messages", json=document), 400, title, description)
        assert stored_total(api) == 0

    @pytest.mark.parametrize("body", ["1e400", '{"deep": [-1E+999]}'])
    def test_a_number_beyond_a_float_stores_nothing(self, api: Api, body: str) -> None:
        # It would be stored as infinity and answered as Infinity, which is not JSON.
        raw = '{"messages": [{"body": 1}, {"body": ' + body + "}]}"
        assert_error(
            api.post("/v2/queues/q/messages", body=raw),
            400,
            "Invalid request body",
            "Request body could not be parsed.",
        )
        assert stored_total(api) == 0

    def test_the_largest_floats_are_kept(self, api: Api) -> None:
        raw = '{"messages": [{"body": [1.7976931348623157e308, -2.5e-320, 1e2]}]}'
        assert api.post("/v2/queues/q/messages", body=raw).status_code == 201
        [message] = api.get("/v2/queues/q/messages", params={"echo": "true"}).json["messages"]
        assert message["body"] == [1.7976931348623157e308, -2.5e-320, 100.0]

    @pytest.mark.parametrize("ttl", [60, 1209600])
    def test_ttl_boundaries_accepted(self, api: Api, ttl: int) -> None:
        [mid] = api.post_messages("q", {"body": 1, "ttl": ttl})
        assert api.get(f"/v2/queues/q/messages/{mid}").json["ttl"] == ttl

    def test_queue_default_ttl(self, api: Api) -> None:
        api.put("/v2/queues/q", json={"_default_message_ttl": 120})
        [mid] = api.post_messages("q", {"body": 1})
        assert api.get(f"/v2/queues/q/messages/{mid}").json["ttl"] == 120

    @pytest.mark.parametrize(("delay", "ok"), [(-1, False), (0, True), (900, True), (901, False)])
    def test_delay_boundaries_on_delayed_queue(self, api: Api, delay: int, ok: bool) -> None:
        api.put("/v2/queues/q", json={"_default_message_delay": 10})
        result = api.post("/v2/queues/q/messages", json={"messages": [{"body": 1, "delay": delay}]})
        if ok:
            assert result.status_code == 201
        else:
            assert_error(result, 400, "Invalid API request", DELAY_RANGE)
            assert stored_total(api) == 0

    @pytest.mark.parametrize("delay", [5000, "zz", None, 30])
    def test_delay_ignored_on_normal_queue(self, api: Api, delay: object) -> None:
        api.post_messages("q", {"body": 1, "delay": delay})
        assert len(api.get("/v2/queues/q/messages", params={"echo": "true"}).json["messages"]) == 1
        assert api.post("/v2/queues/q/claims").status_code == 201


class TestDelayedQueue:
    def test_walk_through(self, api: Api, request: pytest.FixtureRequest) -> None:
        api.put("/v2/queues/q", json={"_default_message_delay": 30})
        [late, now, later] = api.post_messages(
            "q", {"body": "late"}, {"body": "now", "delay": 0}, {"body": "later", "delay": 120}
        )
        listed = api.get("/v2/queues/q/messages", params={"echo": "true"}).json["messages"]
        assert [m["body"] for m in listed] == ["now"]
        all_listed = api.get(
            "/v2/queues/q/messages", params={"echo": "true", "include_delayed": "true"}
        ).json
        # Posting order; on Swift, the order of their due times.
        in_order = ["late", "now", "later"]
        if request.node.callspec.params["api"] == "swift":
            in_order = ["now", "late", "later"]
        assert [m["body"] for m in all_listed["messages"]] == in_order
        assert "include_delayed=true" in all_listed["links"][0]["href"]
        assert api.get(f"/v2/queues/q/messages/{later}").json["body"] == "later"
        claimed = api.post("/v2/queues/q/claims").json["messages"]
        assert [m["id"] for m in claimed] == [now]
        assert api.post("/v2/queues/q/claims").status_code == 204
        api.clock.advance(ms=29_999)
        assert api.post("/v2/queues/q/claims").status_code == 204
        api.clock.advance(ms=1)
        assert [m["id"] for m in api.post("/v2/queues/q/claims").json["messages"]] == [late]


class TestList:
    def test_pages_and_links(self, api: Api) -> None:
        api.post_messages("q", *[{"body": i} for i in range(5)])
        params = {"limit": "2", "echo": "true"}
        pages = []
        result = api.get("/v2/queues/q/messages", params=params)
        while result.json["messages"]:
            pages.append([m["body"] for m in result.json["messages"]])
            [link] = result.json["links"]
            path, query = link["href"].split("?")
            assert path == "/v2/queues/q/messages" and "limit=2" in query and "echo=true" in query
            result = api.get(path, query_string=query)
        assert pages == [[0, 1], [2, 3], [4]]
        assert result.json == {"messages": [], "links": []}

    def test_message_shape(self, api: Api) -> None:
        [mid] = api.post_messages("q", {"body": {"a": 1}, "ttl": 300})
        api.clock.advance(3)
        [m] = api.get("/v2/queues/q/messages", params={"echo": "true"}).json["messages"]
        assert m == {
            "id": mid,
            "href": f"/v2/queues/q/messages/{mid}",
            "ttl": 300,
            "age": 3,
            "body": {"a": 1},
        }

    def test_missing_queue_is_empty(self, api: Api) -> None:
        assert api.get("/v2/queues/none/messages").json == {"messages": [], "links": []}

    def test_echo_and_include_claimed(self, api: Api) -> None:
        api.post_messages("q", {"body": "mine"})
        api.post_messages("q", {"body": "theirs"}, headers={"Client-ID": OTHER_CLIENT_ID})
        assert [m["body"] for m in api.get("/v2/queues/q/messages").json["messages"]] == ["theirs"]
        claim = api.post("/v2/queues/q/claims", params={"limit": 1})
        claim_id = claim.headers["location"].rsplit("/", 1)[1]
        listed = api.get(
            "/v2/queues/q/messages", params={"echo": "true", "include_claimed": "true"}
        ).json
        assert listed["messages"][0]["href"].endswith(f"?claim_id={claim_id}")
        assert [
            m["body"]
            for m in api.get("/v2/queues/q/messages", params={"echo": "true"}).json["messages"]
        ] == ["theirs"]

    @pytest.mark.parametrize("limit", ["0", "21"])
    def test_limit_bounds(self, api: Api, limit: str) -> None:
        assert_error(
            api.get("/v2/queues/q/messages", params={"limit": limit}),
            400,
            "Invalid API request",
            "Limit must be at least 1 and may not be greater than 20.",
        )

    def test_limit_20_and_unknown_marker(self, api: Api) -> None:
        assert api.get("/v2/queues/q/messages", params={"limit": "20"}).status_code == 200
        api.post_messages("q", {"body": 1}, {"body": 2})
        # Zaqar answers a marker it does not know with the first page.
        for marker in ("zz", "invalid"):
            result = api.get("/v2/queues/q/messages", params={"marker": marker, "echo": "true"})
            assert result.status_code == 200
            assert [m["body"] for m in result.json["messages"]] == [1, 2]

    def test_message_id_as_marker(self, api: Api) -> None:
        ids = api.post_messages("q", {"body": 1}, {"body": 2}, {"body": 3})
        result = api.get("/v2/queues/q/messages", params={"marker": ids[0], "echo": "true"})
        assert [m["body"] for m in result.json["messages"]] == [2, 3]


class TestGet:
    def test_bulk_get(self, api: Api) -> None:
        ids = api.post_messages("q", {"body": 1}, {"body": 2})
        result = api.get("/v2/queues/q/messages", query_string=f"ids={ids[1]},nope,{ids[0]}")
        assert [m["body"] for m in result.json["messages"]] == [2, 1]
        assert "links" not in result.json
        encoded = api.get("/v2/queues/q/messages", query_string=f"ids={ids[0]}%2C{ids[1]}")
        assert len(encoded.json["messages"]) == 2

    def test_bulk_get_none_found(self, api: Api) -> None:
        assert_error(
            api.get("/v2/queues/q/messages", params={"ids": "a,b"}),
            404,
            "Not found",
            "No messages with IDs: ['a', 'b'] found in the queue q for project project-1.",
        )

    def test_bulk_get_limit(self, api: Api) -> None:
        ids = ",".join(f"id{i}" for i in range(21))
        assert api.get("/v2/queues/q/messages", query_string=f"ids={ids}").status_code == 400

    def test_get_one(self, api: Api) -> None:
        [mid] = api.post_messages("q", {"body": "x"})
        assert api.get(f"/v2/queues/q/messages/{mid}").json["body"] == "x"
        assert_error(
            api.get("/v2/queues/q/messages/nope"),
            404,
            "Not found",
            "Message nope does not exist in queue q for project project-1",
        )


class TestDelete:
    def test_claim_rules(self, api: Api) -> None:
        [m1, m2] = api.post_messages("q", {"body": 1}, {"body": 2})
        claim_id = (
            api.post("/v2/queues/q/claims", params={"limit": 1})
            .headers["location"]
            .rsplit("/", 1)[1]
        )
        assert api.delete("/v2/queues/q/messages/missing").status_code == 204
        assert_error(
            api.delete(f"/v2/queues/q/messages/{m1}"),
            403,
            "Unable to delete",
            "This message is claimed; it cannot be deleted without a valid claim ID.",
        )
        assert_error(
            api.delete(f"/v2/queues/q/messages/{m1}", params={"claim_id": "bogus"}),
            400,
            "Unable to delete",
            "The specified claim does not exist or has expired.",
        )
        assert_error(
            api.delete(f"/v2/queues/q/messages/{m2}", params={"claim_id": claim_id}),
            400,
            "Unable to delete",
            "A claim was specified, but the message is not currently claimed.",
        )
        assert (
            api.delete(f"/v2/queues/q/messages/{m1}", params={"claim_id": claim_id}).status_code
            == 204
        )
        assert api.delete(f"/v2/queues/q/messages/{m2}").status_code == 204
        assert stored_total(api) == 0

    def test_bulk_delete(self, api: Api) -> None:
        ids = api.post_messages("q", {"body": 1}, {"body": 2}, {"body": 3})
        assert (
            api.delete(
                "/v2/queues/q/messages", query_string=f"ids={ids[0]},{ids[1]},nope"
            ).status_code
            == 204
        )
        assert stored_total(api) == 1

    @pytest.mark.parametrize(
        ("query", "description"),
        [
            (
                "",
                'The request should have either "ids" or "pop" parameter in the request, to be able to delete.',
            ),
            ("ids=a&pop=1", "pop and id params cannot be present together in the delete request."),
            (
                "ids=" + ",".join(f"i{n}" for n in range(21)),
                "ids parameter should have at least 1 and not greater than 20 values.",
            ),
            ("pop=0", "Pop value must be at least 1 and may not be greater than 20."),
            ("pop=21", "Pop value must be at least 1 and may not be greater than 20."),
        ],
    )
    def test_bulk_delete_errors(self, api: Api, query: str, description: str) -> None:
        api.post_messages("q", {"body": 1})
        assert_error(
            api.delete("/v2/queues/q/messages", query_string=query),
            400,
            "Invalid API request",
            description,
        )
        assert stored_total(api) == 1

    def test_pop(self, api: Api) -> None:
        api.put("/v2/queues/q", json={"_default_message_delay": 10})
        [first, _delayed, third] = api.post_messages(
            "q", {"body": 1, "delay": 0}, {"body": 2}, {"body": 3, "delay": 0}
        )
        result = api.delete("/v2/queues/q/messages", params={"pop": "20"})
        assert result.status_code == 200
        popped = result.json["messages"]
        assert [m["id"] for m in popped] == [first, third]
        assert set(popped[0]) == {"id", "body", "ttl", "age", "claim_id", "claim_count"}
        assert api.delete("/v2/queues/q/messages", params={"pop": "1"}).json == {"messages": []}
        assert stored_total(api) == 1
