"""zaqar-delay extensions over HTTP: deliver_at, reschedule, the auditor's edit, dedup_id."""

from __future__ import annotations

import datetime
import json

import pytest

from tests.helpers.api import Api, assert_error
from zaqar_delay.api import views


def iso(ms: int) -> str:
    return views.timestamp_ms(ms)


class TestDeliverAt:
    def test_rfc3339_and_epoch_ms_on_a_normal_queue(self, api: Api) -> None:
        now = api.clock.now_ms()
        ids = api.post_messages(
            "q",
            {"body": "iso", "deliver_at": iso(now + 1500)},
            {"body": "epoch", "deliver_at": now + 2500},
            {"body": "offset", "deliver_at": "2027-01-15T09:00:03.500+01:00"},
        )
        assert api.clock.now_ms() == 1_800_000_000_000  # 2027-01-15T08:00:00Z
        assert api.post("/v2/queues/q/claims").status_code == 204
        api.clock.advance(ms=1499)
        assert api.post("/v2/queues/q/claims").status_code == 204
        api.clock.advance(ms=1)
        first = api.post("/v2/queues/q/claims", params={"limit": 1}).json["messages"]
        assert [m["id"] for m in first] == [ids[0]]
        api.clock.advance(ms=2000)
        rest = api.post("/v2/queues/q/claims").json["messages"]
        assert [m["body"] for m in rest] == ["epoch", "offset"]

    def test_past_within_tolerance_is_now(self, api: Api) -> None:
        api.post_messages("q", {"body": 1, "deliver_at": api.clock.now_ms() - 4999})
        assert api.post("/v2/queues/q/claims").status_code == 201

    @pytest.mark.parametrize(
        ("message", "status", "fragment"),
        [
            ({"body": 1, "deliver_at": -5001}, 400, "in the past"),
            ({"body": 1, "deliver_at": 900_001}, 400, "may not be more than 900 seconds from now"),
            (
                {"body": 1, "deliver_at": "2027-01-15T08:00:00"},
                400,
                "not an RFC 3339 time with an offset",
            ),
            ({"body": 1, "deliver_at": "tomorrow"}, 400, "not an RFC 3339 time"),
            ({"body": 1, "deliver_at": [1]}, 400, "must be an RFC 3339 time or epoch milliseconds"),
            ({"body": 1, "deliver_at": 5000, "delay": 5}, 400, "not both"),
        ],
    )
    def test_invalid(
        self, api: Api, message: dict[str, object], status: int, fragment: str
    ) -> None:
        if isinstance(message["deliver_at"], int):
            message = {**message, "deliver_at": api.clock.now_ms() + int(message["deliver_at"])}  # type: ignore[call-overload]
        result = api.post("/v2/queues/q/messages", json={"messages": [message]})
        assert result.status_code == status
        assert fragment in result.json["description"]
        assert api.get("/v2/queues/q/stats").json["messages"]["total"] == 0

    def test_cap_boundary(self, api: Api) -> None:
        api.post_messages("q", {"body": 1, "deliver_at": api.clock.now_ms() + 900_000})
        assert api.get("/v2/queues/q/stats").json["messages"]["delayed"] == 1


class TestReschedule:
    def test_move_a_scheduled_message(self, api: Api) -> None:
        api.put("/v2/queues/q", json={"_default_message_delay": 600})
        [mid] = api.post_messages("q", {"body": "x"})
        assert api.patch(f"/v2/queues/q/messages/{mid}", json={"delay": 5}).status_code == 204
        api.clock.advance(5)
        assert [m["id"] for m in api.post("/v2/queues/q/claims").json["messages"]] == [mid]

    def test_retry_later_from_a_claim(self, api: Api) -> None:
        [mid] = api.post_messages("q", {"body": "job"})
        claim = api.post("/v2/queues/q/claims")
        claim_id = claim.headers["location"].rsplit("/", 1)[1]
        at = iso(api.clock.now_ms() + 30_000)
        assert_error(
            api.patch(f"/v2/queues/q/messages/{mid}", json={"deliver_at": at}),
            403,
            "Unable to reschedule",
        )
        result = api.patch(
            f"/v2/queues/q/messages/{mid}", params={"claim_id": claim_id}, json={"deliver_at": at}
        )
        assert result.status_code == 204
        assert api.get(f"/v2/queues/q/claims/{claim_id}").json["messages"] == []
        assert api.post("/v2/queues/q/claims").status_code == 204
        api.clock.advance(30)
        assert api.post("/v2/queues/q/claims").status_code == 201

    @pytest.mark.parametrize(
        ("document", "fragment"),
        [
            ({}, "Give body, ttl, or a new due time"),
            ({"delay": 901}, "may not exceed 900 seconds"),
            ({"delay": -1}, "must be at least 0 seconds"),
            ({"delay": 1, "deliver_at": 1}, "not both"),
            ({"delay": "1"}, 'The value of the "delay" field must be a int.'),
            ([], "Document type not supported."),
        ],
    )
    def test_invalid_times(self, api: Api, document: object, fragment: str) -> None:
        [mid] = api.post_messages("q", {"body": "x"})
        result = api.patch(f"/v2/queues/q/messages/{mid}", json=document)
        assert result.status_code == 400
        assert fragment in result.json["description"]

    def test_missing_message(self, api: Api) -> None:
        assert_error(api.patch("/v2/queues/q/messages/nope", json={"delay": 1}), 404, "Not found")


class TestEdit:
    """The auditor's edit: a message seen before it is claimed is changed in place."""

    def test_an_auditor_edits_a_delayed_message_before_it_is_claimed(self, api: Api) -> None:
        api.put("/v2/queues/q", json={"_default_message_delay": 60})
        [mid, other] = api.post_messages(
            "q", {"body": {"amount": 100}, "ttl": 600}, {"body": "next"}
        )
        before = api.get(f"/v2/queues/q/messages/{mid}", params={"with_schedule": "true"}).json
        api.clock.advance(10)
        edited = api.patch(f"/v2/queues/q/messages/{mid}", json={"body": {"amount": 90}})
        assert edited.status_code == 204, edited.text
        after = api.get(f"/v2/queues/q/messages/{mid}", params={"with_schedule": "true"}).json
        assert after["body"] == {"amount": 90}
        assert (after["id"], after["ttl"], after["due"]) == (mid, 600, before["due"])
        api.clock.advance(49)
        assert api.post("/v2/queues/q/claims").status_code == 204
        api.clock.advance(1)
        claimed = api.post("/v2/queues/q/claims").json["messages"]
        assert [(m["id"], m["body"]) for m in claimed] == [(mid, {"amount": 90}), (other, "next")]

    def test_body_with_a_new_due_time_and_ttl(self, api: Api) -> None:
        [mid] = api.post_messages("q", {"body": "draft", "deliver_at": api.clock.now_ms() + 5000})
        change = {"body": "final", "delay": 30, "ttl": 120}
        assert api.patch(f"/v2/queues/q/messages/{mid}", json=change).status_code == 204
        assert api.get(f"/v2/queues/q/messages/{mid}").json["ttl"] == 120
        api.clock.advance(29)
        assert api.post("/v2/queues/q/claims").status_code == 204
        api.clock.advance(1)
        [m] = api.post("/v2/queues/q/claims").json["messages"]
        assert m["body"] == "final"

    def test_a_claimed_message_is_edited_with_its_claim_and_stays_claimed(self, api: Api) -> None:
        [mid] = api.post_messages("q", {"body": "job"})
        claim = api.post("/v2/queues/q/claims")
        href = claim.headers["location"]
        claim_id = href.rsplit("/", 1)[1]
        assert_error(
            api.patch(f"/v2/queues/q/messages/{mid}", json={"body": "stolen"}),
            403,
            "Unable to edit",
        )
        result = api.patch(
            f"/v2/queues/q/messages/{mid}", params={"claim_id": claim_id}, json={"body": "noted"}
        )
        assert result.status_code == 204
        assert [m["body"] for m in api.get(href).json["messages"]] == ["noted"]

    @pytest.mark.parametrize(
        ("document", "status", "fragment"),
        [
            ({"body": "x", "ttl": 59}, 400, "must be at least 60 seconds long"),
            ({"body": "x", "bdy": 1}, 400, "not bdy"),
            ({"body": "x", "delay": -1}, 400, "must be at least 0 seconds"),
            ({"ttl": "60"}, 400, 'The value of the "ttl" field must be a int.'),
        ],
    )
    def test_invalid_edits_change_nothing(
        self, api: Api, document: object, status: int, fragment: str
    ) -> None:
        [mid] = api.post_messages("q", {"body": "original"})
        result = api.patch(f"/v2/queues/q/messages/{mid}", json=document)
        assert result.status_code == status, result.text
        assert fragment in result.json["description"]
        assert api.get(f"/v2/queues/q/messages/{mid}").json["body"] == "original"

    def test_a_ttl_already_run_out_is_refused(self, api: Api) -> None:
        [mid] = api.post_messages("q", {"body": "old", "ttl": 3600})
        api.clock.advance(120)
        result = api.patch(f"/v2/queues/q/messages/{mid}", json={"body": "new", "ttl": 60})
        assert_error(result, 400, "Invalid API request")
        assert "has already run out" in result.json["description"]
        assert api.get(f"/v2/queues/q/messages/{mid}").json["body"] == "old"

    def test_the_body_is_held_to_the_queue_s_post_size(self, api: Api) -> None:
        api.put("/v2/queues/q", json={"_max_messages_post_size": 1024})
        [mid] = api.post_messages("q", {"body": "small"})
        result = api.patch(f"/v2/queues/q/messages/{mid}", json={"body": "x" * 1100})
        assert_error(result, 400, "Invalid API request")
        assert "max size for current queue is 1024" in result.json["description"]
        assert api.get(f"/v2/queues/q/messages/{mid}").json["body"] == "small"

    def test_missing_message_or_queue(self, api: Api) -> None:
        assert_error(api.patch("/v2/queues/q/messages/nope", json={"body": 1}), 404, "Not found")
        api.post_messages("q", {"body": 1})
        assert_error(api.patch("/v2/queues/q/messages/nope", json={"body": 1}), 404, "Not found")


def test_timestamp_format() -> None:
    ms = int(datetime.datetime(2030, 1, 2, 3, 4, 5, 6000, tzinfo=datetime.UTC).timestamp() * 1000)
    assert views.timestamp_ms(ms) == "2030-01-02T03:04:05.006Z"


class TestSortByDue:
    def test_pages_in_due_order(self, api: Api) -> None:
        api.put("/v2/queues/q", json={"_default_message_delay": 60})
        api.post_messages(
            "q", {"body": "c", "delay": 30}, {"body": "a", "delay": 0}, {"body": "b", "delay": 10}
        )
        params = {"sort": "due", "include_delayed": "true", "echo": "true", "limit": "2"}
        first = api.get("/v2/queues/q/messages", params=params).json
        assert [m["body"] for m in first["messages"]] == ["a", "b"]
        path, query = first["links"][0]["href"].split("?")
        assert "sort=due" in query and "include_delayed=true" in query
        second = api.get(path, query_string=query).json
        assert [m["body"] for m in second["messages"]] == ["c"]
        path, query = second["links"][0]["href"].split("?")
        assert api.get(path, query_string=query).json == {"messages": [], "links": []}

    def test_errors(self, api: Api) -> None:
        assert_error(
            api.get("/v2/queues/q/messages", params={"sort": "size"}), 400, "Invalid parameter"
        )
        result = api.get("/v2/queues/q/messages", params={"sort": "due", "include_claimed": "true"})
        assert_error(result, 400, "Invalid API request")
        assert_error(
            api.get("/v2/queues/q/messages", params={"sort": "due", "marker": "7"}),
            400,
            "Invalid parameter",
        )


class TestWithSchedule:
    def test_due_and_claim_count_on_request(self, api: Api) -> None:
        [mid] = api.post_messages("q", {"body": 1, "deliver_at": api.clock.now_ms() + 1234})
        plain = api.get(f"/v2/queues/q/messages/{mid}").json
        assert set(plain) == {"id", "href", "ttl", "age", "body"}
        shown = api.get(f"/v2/queues/q/messages/{mid}", params={"with_schedule": "true"}).json
        assert shown["due"] == iso(api.clock.now_ms() + 1234)
        assert shown["claim_count"] == 0
        api.clock.advance(2)
        claimed = api.post("/v2/queues/q/claims", params={"with_schedule": "true"}).json["messages"]
        assert claimed[0]["claim_count"] == 1
        listed = api.get(
            "/v2/queues/q/messages",
            params={"with_schedule": "true", "echo": "true", "include_claimed": "true"},
        )
        assert listed.json["messages"][0]["due"] == shown["due"]
        assert "with_schedule=true" in listed.json["links"][0]["href"]

    def test_why_it_is_opt_in(self, api: Api) -> None:
        from zaqarclient.queues.v2.message import Message

        [mid] = api.post_messages("q", {"body": 1})
        plain = api.get(f"/v2/queues/q/messages/{mid}").json
        assert Message(None, **plain).id == mid
        shown = api.get(f"/v2/queues/q/messages/{mid}", params={"with_schedule": "true"}).json
        with pytest.raises(TypeError):
            Message(None, **shown)  # python-zaqarclient refuses keys it does not know


class TestDedupId:
    def test_a_repeat_answers_the_first_href_and_lists_it_as_duplicate(self, api: Api) -> None:
        first = api.post("/v2/queues/q/messages", json={"messages": [{"body": 1, "dedup_id": "a"}]})
        assert first.status_code == 201
        assert first.json["duplicates"] == []
        again = api.post(
            "/v2/queues/q/messages",
            json={"messages": [{"body": 2}, {"body": 1, "dedup_id": "a"}]},
        )
        assert again.status_code == 201
        [href] = first.json["resources"]
        assert again.json["resources"][1] == href
        assert again.json["duplicates"] == [href]
        assert again.headers["Location"].endswith(href.rsplit("/", 1)[1])
        stats = api.get("/v2/queues/q/stats").json["messages"]
        assert stats["total"] == 2

    def test_remembered_after_the_message_is_consumed(self, api: Api) -> None:
        [mid] = api.post_messages("q", {"body": "job", "dedup_id": "job-7", "ttl": 300})
        popped = api.delete("/v2/queues/q/messages", params={"pop": 1})
        assert [m["id"] for m in popped.json["messages"]] == [mid]
        assert api.post_messages("q", {"body": "job", "dedup_id": "job-7"}) == [mid]
        assert api.get("/v2/queues/q/stats").json["messages"]["total"] == 0
        api.clock.advance(300)
        [fresh] = api.post_messages("q", {"body": "job", "dedup_id": "job-7"})
        assert fresh != mid

    @pytest.mark.parametrize(
        ("dedup_id", "status", "fragment"),
        [
            (7, 400, 'The value of the "dedup_id" field must be a string.'),
            (None, 400, 'The value of the "dedup_id" field must be a string.'),
            ("", 400, "at least 1 and at most 256 characters"),
            ("x" * 257, 400, "at least 1 and at most 256 characters"),
            ("job-\ud800", 400, "no lone surrogate"),
        ],
    )
    def test_invalid_dedup_ids_store_nothing(
        self, api: Api, dedup_id: object, status: int, fragment: str
    ) -> None:
        # Sent as ASCII JSON: a lone surrogate stays an escape, as a client's encoder sends it.
        payload = {"messages": [{"body": 1}, {"body": 2, "dedup_id": dedup_id}]}
        result = api.post(
            "/v2/queues/q/messages",
            body=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json"},
        )
        assert result.status_code == status, result.text
        assert fragment in result.json["description"] and result.json["title"]
        assert api.get("/v2/queues/q/stats").json["messages"]["total"] == 0
