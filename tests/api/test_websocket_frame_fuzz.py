"""Property-based fuzz of WebSocket request frames (``api/websocket/frames.py``), with
pre-signed URLs on: whatever a frame holds (any JSON, or an action with hostile headers,
signatures and body fields), its answer is a response frame whose status is no 5xx, and a
refusal says why and changes nothing."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import example, given

from tests.helpers.api import CLIENT_ID, Api, api_on
from tests.helpers.fuzz import FUZZ, hostile_text, json_values, observed
from zaqar_delay.api.websocket.actions import ACTIONS
from zaqar_delay.api.websocket.frames import Frames
from zaqar_delay.conf import SignedUrlSettings

SESSION = {"SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8888", "HTTP_HOST": "127.0.0.1:8888"}
FIELDS = [
    "queue_name",
    "message_id",
    "message_ids",
    "claim_id",
    "subscription_id",
    "subscriber",
    "messages",
    "metadata",
    "ttl",
    "grace",
    "limit",
    "marker",
    "echo",
    "include_claimed",
    "detailed",
    "pop",
    "options",
    "resource_types",
]
names = st.sampled_from(["q", "a" * 65, "", "../q"]) | hostile_text
field_values = names | json_values
CLIENT = {"Client-ID": CLIENT_ID, "X-Project-ID": "p"}
headers = st.fixed_dictionaries(
    {"Client-ID": st.just(CLIENT_ID) | hostile_text, "X-Project-ID": st.just("p") | hostile_text},
    optional={
        "X-Roles": hostile_text,
        "URL-Signature": hostile_text,
        "URL-Expires": hostile_text | st.just("2100-01-01T00:00:00"),
        "URL-Methods": hostile_text | st.just("GET,POST"),
        "URL-Paths": hostile_text | st.just("/v2/queues/q/messages"),
        "Accept": hostile_text,
        "Content-Length": hostile_text,
    },
) | st.dictionaries(hostile_text, hostile_text | json_values, max_size=3)
frames = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {
            "action": st.sampled_from(sorted(ACTIONS)) | hostile_text | json_values,
            # A third of the frames with a client's headers, to reach the actions themselves.
            "headers": st.just(CLIENT) | headers | json_values,
            "body": st.dictionaries(st.sampled_from(FIELDS) | hostile_text, field_values)
            | json_values,
        }
    ),
)


@pytest.fixture
def api(request: pytest.FixtureRequest) -> Iterator[Api]:
    yield from api_on(request, "embedded", signed_url=SignedUrlSettings(secret_key="k"))


@FUZZ
@given(frame=frames)
# A queue refused for its metadata is not created.
@example(
    frame={
        "action": "queue_create",
        "headers": CLIENT,
        "body": {"queue_name": "q", "metadata": {"_default_message_ttl": "x"}},
    }
)
# Names beyond Latin-1, and a lone surrogate in a query value: each once an exception.
@example(frame={"action": "message_list", "headers": {}, "body": {"queue_name": "a\u200b"}})
@example(frame={"action": "queue_get", "headers": {}, "body": {"queue_name": "\ud800"}})
@example(
    frame={"action": "message_list", "headers": {}, "body": {"queue_name": "q", "marker": "\ud800"}}
)
# A signature header beyond ASCII (compare_digest refuses such text).
@example(
    frame={
        "action": "message_list",
        "headers": {
            "URL-Signature": "é",
            "URL-Expires": "2100-01-01T00:00:00",
            "URL-Methods": "GET",
            "URL-Paths": "/v2/queues/q/messages",
            "X-Project-ID": "p",
        },
        "body": {"queue_name": "q"},
    }
)
def test_no_frame_is_answered_with_a_server_error(api: Api, frame: Any) -> None:
    """A frame's answer is never a 5xx, and a refusal says why and changes none of what
    ``observed`` reads of project ``p`` and the queue the frame names."""
    queue = _queue_named(frame)
    before = observed(api, "p", "queues", queue)
    answer = Frames(api.client.app, SESSION, keystone=False).answer(frame)
    status = answer["headers"]["status"]
    assert 100 <= status < 500, answer
    if status >= 400:
        assert answer["body"], answer
        assert observed(api, "p", "queues", queue) == before, answer


def _queue_named(frame: Any) -> str:
    """The queue a frame names, quoted for a path (``q`` when it names none)."""
    body = frame.get("body") if isinstance(frame, dict) else None
    name = body.get("queue_name") if isinstance(body, dict) else None
    if not isinstance(name, str) or not name:
        return "q"
    return urllib.parse.quote(name, safe="", errors="surrogatepass")
