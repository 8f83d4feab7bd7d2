"""Property-based fuzz of the queue, message and claim routes: whatever a client sends as
queue metadata, a post, a claim, a message change or a listing's query string, and whatever
``Client-ID`` it names, the answer is a 2xx or a 4xx with Zaqar's error shape, never a 500,
and what it refuses writes nothing: no queue, no message, no change."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import event, given

from tests.helpers.api import Api, api_on, pooled_api_on
from tests.helpers.fuzz import FUZZ, assert_no_server_error, hostile_text, json_values, queries

QUEUE = "/v2/queues/q"
JSON = {"Content-Type": "application/json"}
PATCH = {"Content-Type": "application/openstack-messaging-v2.0-json-patch"}
RESERVED = [
    "_dead_letter_queue",
    "_dead_letter_queue_messages_ttl",
    "_default_message_delay",
    "_default_message_ttl",
    "_delete_after_push",
    "_enable_encrypt_messages",
    "_flavor",
    "_max_claim_count",
    "_max_messages_post_size",
    "_retry_backoff",
]
numbers = st.integers(-(2**65), 2**65) | st.floats(allow_nan=False) | st.sampled_from([0, 1, 60])
values = json_values | numbers | hostile_text
metadata = st.dictionaries(st.sampled_from(RESERVED) | hostile_text, values, max_size=4)
patches = st.lists(
    st.fixed_dictionaries(
        {
            "op": st.sampled_from(["add", "replace", "remove", "test", "move"]) | values,
            "path": st.sampled_from(["/metadata/_default_message_delay", "/metadata/x", "/"])
            | hostile_text
            | values,
        },
        optional={"value": values},
    )
    | values,
    max_size=3,
)


def some_of(valid: dict[str, Any], fields: dict[str, st.SearchStrategy[Any]]) -> Any:
    """``valid`` with up to two of its fields (or others of ``fields``) replaced by hostile
    values, so that most requests get past their first rule."""
    changes = st.lists(st.sampled_from(sorted(fields)), max_size=2, unique=True).flatmap(
        lambda keys: st.fixed_dictionaries({key: fields[key] for key in keys})
    )
    return changes.map(lambda change: {**valid, **change})


messages = some_of(
    {"body": {"event": "x"}, "ttl": 300},
    {
        "body": json_values,
        "ttl": values,
        "delay": values | st.sampled_from([0, 5, 3600]),
        "deliver_at": values | st.sampled_from(["9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z"]),
        "dedup_id": values | st.sampled_from(["a", "a" * 200]),
    },
)
posts = st.one_of(
    json_values,
    st.fixed_dictionaries({"messages": st.lists(messages, min_size=1, max_size=3)}),
    st.fixed_dictionaries({"messages": st.lists(messages | values, max_size=3) | values}),
)
claims = some_of({"ttl": 60, "grace": 60}, {"ttl": values, "grace": values}) | json_values

client_ids = st.sampled_from(
    ["3381af92-2b9e-11e3-b191-71861300734c", "not-a-uuid", "x" * 300, " "]
) | st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=40)


@pytest.fixture(
    params=[
        "embedded",
        pytest.param("mongodb", marks=pytest.mark.other_store),
        pytest.param("pooled", marks=pytest.mark.other_store),
    ]
)
def api(request: pytest.FixtureRequest) -> Iterator[Api]:
    """The API on the embedded Redis, MongoDB and pooled. The rules fuzzed here are checked
    above the stores; Swift, whose queue writes each wait for a settle, would make a run of
    these examples minutes long, and the contract suite holds it to the rest."""
    if request.param == "pooled":
        yield from pooled_api_on(request)
    else:
        yield from api_on(request, request.param)


def queue_names(api: Api) -> list[str]:
    """The project's queues (each example deletes its queue at the end)."""
    return [queue["name"] for queue in api.get("/v2/queues").json["queues"]]


@FUZZ
@given(queue_metadata=metadata, change=patches)
def test_no_queue_metadata_is_a_server_error(api: Api, queue_metadata: Any, change: Any) -> None:
    created = api.put(QUEUE, body=json.dumps(queue_metadata).encode(), headers=JSON)
    assert_no_server_error(created)
    if created.status_code >= 400:  # a refused create makes no queue
        assert queue_names(api) == []
    before = api.get(QUEUE)
    patched = api.patch(QUEUE, body=json.dumps(change).encode(), headers=PATCH)
    assert_no_server_error(patched)
    after = api.get(QUEUE)
    assert_no_server_error(after)
    if patched.status_code >= 400:  # a refused change changes nothing
        assert after.json == before.json
    assert_no_server_error(api.get(f"{QUEUE}/stats"))
    assert api.delete(QUEUE).status_code == 204


edits = (
    some_of(
        {"delay": 5},
        {
            "body": json_values,
            "ttl": values,
            "delay": values,
            "deliver_at": values
            | st.sampled_from(["9999-12-31T23:59:59Z", "2000-01-01T00:00:00Z"]),
            "x": values,
        },
    )
    | json_values
)


@FUZZ
@given(edit=edits, renewal=claims, claimed=st.booleans(), query=queries)
def test_no_message_edit_or_claim_renewal_is_a_server_error(
    api: Api, edit: Any, renewal: Any, claimed: bool, query: str
) -> None:
    """A message, claimed or not, edited as the auditor's PATCH does, and its claim renewed,
    with hostile bodies and query strings."""
    [message_id] = api.post_messages("q", {"body": 1, "ttl": 300})
    href, claim_query = f"{QUEUE}/messages/{message_id}", query
    if claimed:
        taken = api.post(f"{QUEUE}/claims", json={"ttl": 60, "grace": 60})
        claim_href = taken.json["messages"][0]["href"]
        claim_id = claim_href.split("claim_id=")[1]
        claim_query = f"claim_id={claim_id}&{query}"
        renewed = api.patch(
            f"{QUEUE}/claims/{claim_id}", body=json.dumps(renewal).encode(), headers=JSON
        )
        assert_no_server_error(renewed)
    before = api.get(href, query_string="with_schedule=true")
    edited = api.patch(href, body=json.dumps(edit).encode(), headers=JSON, query_string=claim_query)
    assert_no_server_error(edited)
    event(f"edited {edited.status_code}")
    after = api.get(href, query_string="with_schedule=true")
    assert_no_server_error(after)
    if edited.status_code >= 400:  # a refused edit changes nothing
        assert after.json == before.json
    assert api.delete(QUEUE).status_code == 204


@FUZZ
@given(post=posts, claim=claims, query=queries, client_id=client_ids)
def test_no_post_claim_or_listing_is_a_server_error(
    api: Api, post: Any, claim: Any, query: str, client_id: str
) -> None:
    headers = {**JSON, "Client-ID": client_id}
    posted = api.post(f"{QUEUE}/messages", body=json.dumps(post).encode(), headers=headers)
    assert_no_server_error(posted)
    if posted.status_code >= 400:  # a refused post stores nothing, nor makes the queue
        assert queue_names(api) == []
    claimed = api.post(
        f"{QUEUE}/claims", body=json.dumps(claim).encode(), headers=headers, query_string=query
    )
    assert_no_server_error(claimed)
    event(f"posted {posted.status_code}, claimed {claimed.status_code}")
    assert_no_server_error(api.get(f"{QUEUE}/messages", headers=headers, query_string=query))
    assert_no_server_error(api.get("/v2/queues", headers=headers, query_string=query))
    if posted.status_code == 201:
        href = posted.json["resources"][0]
        assert_no_server_error(api.get(href, headers=headers, query_string=query))
        assert_no_server_error(api.delete(href, headers=headers, query_string=query))
    assert_no_server_error(api.delete(f"{QUEUE}/messages", headers=headers, query_string=query))
    assert api.delete(QUEUE).status_code == 204
