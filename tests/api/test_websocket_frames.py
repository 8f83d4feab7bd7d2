"""WebSocket frames answered through the HTTP API in process (``api/websocket/frames.py``):
keystone sessions authenticate first, a frame's headers reach the API only as allowed, and
the handshake's rules. The sessions themselves run under gunicorn in
``tests/functional/test_websocket.py``."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import falcon.testing
import pytest

from tests.helpers.api import Api, api_on, settings_on, signed_headers
from tests.helpers.keystone import Keystone, keystone_app
from tests.helpers.stores import store_url
from zaqar_delay.api.app import create_wsgi_app
from zaqar_delay.api.websocket.frames import Frames
from zaqar_delay.api.websocket.handshake import accept_headers, wants_session
from zaqar_delay.api.websocket.project_sessions import ProjectSessions
from zaqar_delay.storage.redis.embedded import EmbeddedRedis

CLIENT_ID = "3381af92-2b9e-11e3-b191-71861300734c"
SESSION = {"SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8888", "HTTP_HOST": "127.0.0.1:8888"}


def frame(action: str, project: str = "p", **body: Any) -> dict[str, Any]:
    headers = {"Client-ID": CLIENT_ID, "X-Project-ID": project}
    return {"action": action, "headers": headers, "body": body}


@pytest.fixture
def api(request: pytest.FixtureRequest) -> Iterator[Api]:
    """The API on the embedded store: frames reach it as HTTP requests do, whatever the store."""
    yield from api_on(request, "embedded")


@pytest.fixture
def keystone(tmp_path: Path, embedded_redis: EmbeddedRedis) -> Iterator[Keystone]:
    for found, _ in keystone_app(tmp_path, embedded_redis, "[signed_url]\nsecret_key = k\n"):
        yield found


def test_a_pre_signed_frame_needs_no_authentication(keystone: Keystone) -> None:
    owner = keystone.token("p1")
    keystone.call("POST", "/v2/queues/q/messages", token=owner, json={"messages": [{"body": 1}]})
    share = keystone.call("POST", "/v2/queues/q/share", token=owner, json={}).json
    frames = Frames(keystone.client.app, SESSION, keystone=True)
    listed = {"action": "message_list", "headers": signed_headers(share), "body": {}}
    listed["body"] = {"queue_name": "q", "echo": True}
    answer = frames.answer(listed)
    assert answer["headers"]["status"] == 200, answer
    assert [m["body"] for m in answer["body"]["messages"]] == [1]
    # The signature binds its project, methods and paths, as over HTTP.
    forged = {**listed, "headers": {**signed_headers(share), "X-Project-ID": "p2"}}
    assert frames.answer(forged)["headers"]["status"] == 404
    elsewhere = {**listed, "action": "queue_list", "body": {}}
    assert frames.answer(elsewhere)["headers"]["status"] == 404


def test_a_keystone_session_answers_only_after_authenticating(keystone: Keystone) -> None:
    frames = Frames(keystone.client.app, SESSION, keystone=True)
    before = frames.answer(frame("queue_list", "alpha"))
    assert before["headers"]["status"] == 403
    assert before["body"]["error"] == "Not authentified."
    wrong = {**frame("authenticate", "alpha"), "headers": {"X-Auth-Token": "forged"}}
    assert frames.answer(wrong)["headers"]["status"] == 401
    assert frames.answer(frame("queue_list", "alpha"))["headers"]["status"] == 403
    token = keystone.token("alpha")
    good = frame("authenticate", "alpha")
    good["headers"]["X-Auth-Token"] = token
    assert frames.answer(good)["body"] == {"message": "Authentified."}
    created = frames.answer(frame("queue_create", "alpha", queue_name="mine"))
    assert created["headers"]["status"] == 201
    # The token's project, whatever the frame names: the queue is alpha's.
    listed = frames.answer(frame("queue_list", "beta"))
    assert listed["headers"]["status"] in (200, 403)
    assert keystone.call("GET", "/v2/queues/mine/stats", token).status_code == 200


def test_a_readers_session_is_refused_what_the_policy_refuses(keystone: Keystone) -> None:
    frames = Frames(keystone.client.app, SESSION, keystone=True)
    auth = frame("authenticate", "gamma")
    auth["headers"]["X-Auth-Token"] = keystone.token("gamma", "reader")
    assert frames.answer(auth)["headers"]["status"] == 200
    # A roles header in a frame is nobody's say under keystone.
    refused = frame("queue_create", "gamma", queue_name="q")
    refused["headers"]["X-Roles"] = "admin"
    answer = frames.answer(refused)
    assert answer["headers"]["status"] == 403
    assert set(answer["body"]) == {"error", "exception"}


def test_noauth_frames_reach_the_api_with_only_the_allowed_headers(api: Api) -> None:
    frames = Frames(api.client.app, SESSION, keystone=False)
    # Health is an admin route: the roles header counts without keystone, as over HTTP.
    plain = frames.answer(frame("check_node_health"))
    assert plain["headers"]["status"] == 403
    admin = frame("check_node_health")
    admin["headers"]["X-Roles"] = "admin"
    assert frames.answer(admin)["headers"]["status"] == 200
    # Any other header stays out: the answer is JSON whatever a frame says it accepts (the
    # API answers 406 to a request that takes no JSON).
    typed = frame("message_post", "p", queue_name="q", messages=[{"body": 1}])
    typed["headers"]["Accept"] = "text/plain"
    assert frames.answer(typed)["headers"]["status"] == 201


@pytest.mark.parametrize("number", [float("inf"), float("-inf"), float("nan")])
def test_a_frame_with_a_number_json_cannot_hold_is_refused(api: Api, number: float) -> None:
    # A text frame's 1e400 decodes to infinity, and MessagePack carries infinities and NaN:
    # stored, they would be answered over HTTP as Infinity or NaN, which are not JSON.
    frames = Frames(api.client.app, SESSION, keystone=False)
    posted = frame("message_post", queue_name="q", messages=[{"body": 1}, {"body": [number]}])
    answer = frames.answer(posted)
    assert answer["headers"]["status"] == 400
    assert answer["body"]["error"] == "Request body could not be parsed."
    listed = frames.answer(frame("message_list", queue_name="q", echo=True))
    assert listed["headers"]["status"] == 200 and listed["body"]["messages"] == []


def test_the_handshake_accepts_rfc_6455s_example_and_refuses_the_rest() -> None:
    key = "dGhlIHNhbXBsZSBub25jZQ=="
    request = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/",
        "HTTP_UPGRADE": "websocket",
        "HTTP_CONNECTION": "keep-alive, Upgrade",
        "HTTP_SEC_WEBSOCKET_VERSION": "13",
        "HTTP_SEC_WEBSOCKET_KEY": key,
    }
    assert wants_session(request)
    expected = base64.b64encode(
        hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()
    ).decode()
    assert ("Sec-WebSocket-Accept", expected) in accept_headers(request)
    assert expected == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    for name, value in (
        ("REQUEST_METHOD", "POST"),
        ("HTTP_CONNECTION", "keep-alive"),
        ("HTTP_SEC_WEBSOCKET_VERSION", "8"),
        ("HTTP_SEC_WEBSOCKET_KEY", "c2hvcnQ="),
        ("HTTP_SEC_WEBSOCKET_KEY", "not base64!"),
    ):
        assert isinstance(accept_headers({**request, name: value}), str), name
    assert not wants_session({**request, "PATH_INFO": "/v2/queues"})


@pytest.mark.parametrize(
    ("host", "scheme", "accepted"),
    [
        ("zaqar.example.com:443", "http", True),
        ("zaqar.example.com", "https", True),
        ("[2001:db8::1]:443", "http", True),
        ("zaqar.example.com", "http", False),  # port 80
        ("127.0.0.1:8888", "http", False),
        ("[2001:db8::1]", "http", False),
        ("zaqar.example.com:x", "http", False),
        ("", "http", False),
    ],
)
def test_with_external_port_the_host_header_must_name_it(
    host: str, scheme: str, accepted: bool
) -> None:
    request = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/",
        "HTTP_HOST": host,
        "wsgi.url_scheme": scheme,
        "HTTP_UPGRADE": "websocket",
        "HTTP_CONNECTION": "Upgrade",
        "HTTP_SEC_WEBSOCKET_VERSION": "13",
        "HTTP_SEC_WEBSOCKET_KEY": "dGhlIHNhbXBsZSBub25jZQ==",
    }
    # Without the option the Host header is not checked.
    assert not isinstance(accept_headers(request), str)
    answer = accept_headers(request, external_port=443)
    assert isinstance(answer, list) if accepted else "external_port" in answer


def test_a_server_that_cannot_switch_protocols_answers_501(
    request: pytest.FixtureRequest, api: Api
) -> None:
    settings = settings_on(store_url(request, "embedded"))
    client = falcon.testing.TestClient(create_wsgi_app(settings, api.driver, api.clock))
    result = client.simulate_get(
        "/",
        headers={
            "Upgrade": "websocket",
            "Connection": "Upgrade",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        },
    )
    assert result.status_code == 501
    assert "zaqar-delay-server" in result.json["description"]
    # Without the upgrade the root is the versions document, as always.
    assert client.simulate_get("/").status_code in (200, 300)


def test_a_project_holds_at_most_its_sessions_under_keystone(keystone: Keystone) -> None:
    projects = ProjectSessions(limit=1)

    def session() -> Frames:
        return Frames(keystone.client.app, SESSION, keystone=True, projects=projects)

    def authenticate(frames: Frames, project: str) -> dict[str, Any]:
        auth = frame("authenticate", project)
        auth["headers"]["X-Auth-Token"] = keystone.token(project)
        return frames.answer(auth)

    first, second, other = session(), session(), session()
    assert authenticate(first, "alpha")["headers"]["status"] == 200
    # The token's project counts, whatever project the frame names.
    refused = authenticate(second, "alpha")
    assert refused["headers"]["status"] == 429, refused
    assert second.answer(frame("queue_list", "alpha"))["headers"]["status"] == 403
    assert authenticate(other, "beta")["headers"]["status"] == 200
    first.end()
    assert authenticate(second, "alpha")["headers"]["status"] == 200
    # Authenticating again as another project gives the first one's place back.
    assert authenticate(other, "alpha")["headers"]["status"] == 429
    assert authenticate(second, "gamma")["headers"]["status"] == 200
    assert authenticate(other, "alpha")["headers"]["status"] == 200


def test_a_frame_naming_topic_name_addresses_the_topic(api: Api) -> None:
    frames = Frames(api.client.app, SESSION, keystone=False)
    created = frames.answer(frame("queue_create", project="project-1", topic_name="news"))
    assert created["headers"]["status"] == 201, created
    assert created["body"] == "Queue news created."
    posted = frames.answer(
        frame("message_post", project="project-1", topic_name="news", messages=[{"body": 7}])
    )
    assert posted["headers"]["status"] == 201, posted
    [mid] = posted["body"]["message_ids"]
    assert api.get(f"/v2/topics/news/messages/{mid}").json["body"] == 7
    assert api.get("/v2/queues/news/stats").json["messages"]["total"] == 0
    # Claims are a queue's: a topic serves none.
    claim = frames.answer(frame("claim_create", project="project-1", topic_name="news"))
    assert claim["headers"]["status"] == 404
    # A frame naming both addresses the queue, as Zaqar's would.
    both = frames.answer(
        frame("queue_get_stats", project="project-1", topic_name="news", queue_name="news")
    )
    assert both["body"]["messages"]["total"] == 0
    bad = frames.answer(frame("message_list", project="project-1", topic_name="a/b"))
    assert bad["headers"]["status"] == 400
