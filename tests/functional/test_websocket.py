"""Zaqar v2's WebSocket API on the server's own port: python-zaqarclient's ``ws`` transport,
unchanged, and raw frames (malformed, binary, too large) against a real server."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
import requests
import websocket
from zaqarclient.transport import errors as client_errors
from zaqarclient.transport import get_transport_for
from zaqarclient.transport.request import Request

from testbed.processes import ServiceProcess, free_port

pytestmark = pytest.mark.functional

CLIENT_ID = "3381af92-2b9e-11e3-b191-71861300734c"


def ws_url(service: ServiceProcess, path: str = "/") -> str:
    return f"ws://127.0.0.1:{service.port}{path}"


@pytest.fixture
def session(embedded_service: ServiceProcess) -> Iterator[websocket.WebSocket]:
    connection = websocket.create_connection(ws_url(embedded_service), timeout=10)
    yield connection
    connection.close()


def headers(project: str) -> dict[str, str]:
    return {"Client-ID": CLIENT_ID, "X-Project-ID": project}


def call(ws: websocket.WebSocket, action: str, project: str, **body: Any) -> dict[str, Any]:
    ws.send(json.dumps({"action": action, "headers": headers(project), "body": body}))
    answer: dict[str, Any] = json.loads(ws.recv())
    return answer


def status(answer: dict[str, Any]) -> int:
    return int(answer["headers"]["status"])


def test_zaqarclient_ws_transport_honours_the_delay(embedded_service: ServiceProcess) -> None:
    project = f"p-{uuid.uuid4().hex[:8]}"
    options = {
        "auth_opts": {
            "backend": "noauth",
            "options": {"os_project_id": project, "os_auth_token": "unused"},
        }
    }
    endpoint = ws_url(embedded_service)

    def send(ws: Any, action: str, **body: Any) -> Any:
        return ws.send(Request(endpoint, action, content=json.dumps(body)))

    with get_transport_for(endpoint, options=options) as ws:
        created = send(
            ws, "queue_create", queue_name="later", metadata={"_default_message_delay": 2}
        )
        assert created.status_code == 201
        posted = send(ws, "message_post", queue_name="later", messages=[{"body": {"n": 1}}])
        assert posted.status_code == 201
        [message_id] = json.loads(posted.content)["message_ids"]
        before = send(ws, "claim_create", queue_name="later", ttl=60, grace=60, limit=5)
        # Not due yet: nothing to claim, and nothing listed.
        assert before.status_code == 204
        listed = send(ws, "message_list", queue_name="later", echo=True)
        assert json.loads(listed.content)["messages"] == []
        time.sleep(2.2)
        claimed = send(ws, "claim_create", queue_name="later", ttl=60, grace=60, limit=5)
        assert claimed.status_code == 201
        claim = json.loads(claimed.content)
        assert [m["id"] for m in claim["messages"]] == [message_id]
        assert claim["messages"][0]["body"] == {"n": 1}
        deleted = send(
            ws,
            "message_delete",
            queue_name="later",
            message_id=message_id,
            claim_id=claim["claim_id"],
        )
        assert deleted.status_code == 204
        with pytest.raises(client_errors.ResourceNotFound):
            send(ws, "message_get", queue_name="later", message_id=message_id)
    # The same message store as HTTP: the queue holds nothing more.
    stats = requests.get(
        f"{embedded_service.url}/v2/queues/later/stats", headers=headers(project), timeout=10
    ).json()
    assert stats["messages"]["total"] == 0


def test_every_queue_and_claim_action(session: websocket.WebSocket) -> None:
    project = f"p-{uuid.uuid4().hex[:8]}"
    assert status(call(session, "queue_create", project, queue_name="q")) == 201
    assert (
        call(session, "queue_get", project, queue_name="q")["body"]["_default_message_delay"] == 0
    )
    posted = call(
        session, "message_post", project, queue_name="q", messages=[{"body": i} for i in range(3)]
    )
    ids = posted["body"]["message_ids"]
    many = call(session, "message_get_many", project, queue_name="q", message_ids=ids[:2])
    assert [m["body"] for m in many["body"]["messages"]] == [0, 1]
    one = call(session, "message_get", project, queue_name="q", message_id=ids[2])
    assert one["body"]["messages"]["body"] == 2
    claim = call(session, "claim_create", project, queue_name="q", limit=1, ttl=60, grace=60)
    claim_id = claim["body"]["claim_id"]
    assert (
        call(session, "claim_get", project, queue_name="q", claim_id=claim_id)["body"]["ttl"] == 60
    )
    updated = call(session, "claim_update", project, queue_name="q", claim_id=claim_id, ttl=90)
    assert (status(updated), updated["body"]) == (204, f"Claim {claim_id} updated.")
    released = call(session, "claim_delete", project, queue_name="q", claim_id=claim_id)
    assert status(released) == 204
    stats = call(session, "queue_get_stats", project, queue_name="q")["body"]["messages"]
    assert (stats["total"], stats["claimed"]) == (3, 0)
    assert (
        status(call(session, "message_delete_many", project, queue_name="q", message_ids=ids[:1]))
        == 204
    )
    popped = call(session, "message_delete_many", project, queue_name="q", pop=1)
    assert len(popped["body"]["messages"]) == 1
    assert status(call(session, "queue_purge", project, queue_name="q")) == 204
    names = [q["name"] for q in call(session, "queue_list", project)["body"]["queues"]]
    assert names == ["q"]
    removed = call(session, "queue_delete", project, queue_name="q")
    assert (status(removed), removed["body"]) == (204, "Queue q removed.")
    assert status(call(session, "ping_node", project)) == 204
    assert "resources" in call(session, "get_home_doc", project)["body"]


def test_the_routes_rules_and_errors_apply(session: websocket.WebSocket) -> None:
    project = f"p-{uuid.uuid4().hex[:8]}"
    bad_name = call(session, "queue_create", project, queue_name="no spaces")
    assert status(bad_name) == 400 and "queue" in bad_name["body"]["error"].lower()
    missing = call(session, "message_get", project, queue_name="nothing", message_id="f" * 32)
    assert status(missing) == 404
    no_ttl_room = call(session, "claim_create", project, queue_name="q", ttl=10**9)
    assert status(no_ttl_room) == 400
    no_project = call(session, "queue_list", "")
    assert status(no_project) == 400


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        ("not json", "Can't decode text (JSON) request"),
        ("[1, 2]", "Expected dict"),
        ('{"action": "nope"}', "Invalid action"),
        ('{"action": "queue_get", "headers": {"X-Project-ID": 7}}', "headers"),
        ('{"action": "queue_get", "body": []}', "body must be an object"),
        ('{"action": "queue_list", "headers": {"X-Project-ID": "a\\r\\nb"}}', "HTTP forbids"),
        ('{"action": "queue_get", "body": {}}', "Missing parameter queue_name"),
        (
            '{"action": "queue_get", "body": {"queue_name": "../../v2/health"}}',
            "Invalid queue_name",
        ),
        ('{"action": "message_list", "body": {"queue_name": "q", "limit": {"a": 1}}}', "limit"),
        # Deeper than the parser recurses: it used to end the session.
        pytest.param(
            '{"action": "ping_node", "body": {"x": ' + "[" * 1500 + "]" * 1500 + "}}",
            "decode",
            id="deeper-than-the-parser",
        ),
        # Parsed, but deeper than echoing it and posting its body may recurse.
        pytest.param(
            '{"action": "message_post", "headers": {"X-Project-ID": "p"}, "body": {"queue_name":'
            ' "q", "messages": [{"body": ' + "[" * 600 + "]" * 600 + "}]}}",
            "A frame nests at most 512 levels deep.",
            id="deeper-than-a-frame-may-nest",
        ),
    ],
)
def test_a_malformed_frame_is_a_400_frame_and_the_session_goes_on(
    session: websocket.WebSocket, sent: str, expected: str
) -> None:
    session.send(sent)
    answer = json.loads(session.recv())
    assert answer["headers"]["status"] == 400
    assert expected in answer["body"]["error"], answer
    assert status(call(session, "ping_node", "p")) == 204


def test_binary_frames_are_answered_in_messagepack(session: websocket.WebSocket) -> None:
    project = f"p-{uuid.uuid4().hex[:8]}"
    frame = {"action": "queue_create", "headers": headers(project), "body": {"queue_name": "b"}}
    session.send_binary(msgpack.packb(frame))
    opcode, data = session.recv_data()
    assert opcode == websocket.ABNF.OPCODE_BINARY
    answer = msgpack.unpackb(data)
    assert answer["headers"]["status"] == 201 and answer["request"] == frame
    session.send_binary(b"\xc1")  # never used by MessagePack
    opcode, data = session.recv_data()
    assert msgpack.unpackb(data)["headers"]["status"] == 400
    deep: list[Any] = []
    for _ in range(1000):  # MessagePack decodes it (it stops at 1,024 levels); it used to 500
        deep = [deep]
    frame["body"] = {"queue_name": "b", "messages": [{"body": deep}]}
    frame["action"] = "message_post"
    session.send_binary(msgpack.packb(frame))
    opcode, data = session.recv_data()
    assert msgpack.unpackb(data)["body"]["error"] == "A frame nests at most 512 levels deep."


def test_a_session_that_subscribed_itself_in_messagepack_is_notified_in_messagepack(
    embedded_service: ServiceProcess, session: websocket.WebSocket
) -> None:
    project = f"p-{uuid.uuid4().hex[:8]}"
    frame = {
        "action": "subscription_create",
        "headers": headers(project),
        "body": {"queue_name": "packed", "ttl": 600},
    }
    session.send_binary(msgpack.packb(frame))
    opcode, data = session.recv_data()
    assert opcode == websocket.ABNF.OPCODE_BINARY
    assert msgpack.unpackb(data)["headers"]["status"] == 201
    posted = requests.post(
        f"{embedded_service.url}/v2/queues/packed/messages",
        json={"messages": [{"body": {"packed": True}}]},
        headers=headers(project),
        timeout=10,
    )
    assert posted.status_code == 201
    opcode, data = session.recv_data()
    assert opcode == websocket.ABNF.OPCODE_BINARY
    note = msgpack.unpackb(data)
    assert note["body"] == {"packed": True} and note["Message_Type"] == "Notification"


def test_a_frame_over_the_limit_closes_the_session(session: websocket.WebSocket) -> None:
    # The default post limit (256 KiB) plus a frame's room (64 KiB), and more.
    session.send(json.dumps({"action": "ping_node", "body": {"pad": "x" * 400_000}}))
    answer = json.loads(session.recv())
    assert answer["headers"]["status"] == 400 and "at most" in answer["body"]["error"]
    opcode, data = session.recv_data(control_frame=True)
    assert opcode == websocket.ABNF.OPCODE_CLOSE
    assert int.from_bytes(data[:2], "big") == 1009


def test_a_handshake_the_server_refuses_is_a_400(embedded_service: ServiceProcess) -> None:
    upgrade = {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version": "8",
    }
    refused = requests.get(f"{embedded_service.url}/", headers=upgrade, timeout=10)
    assert refused.status_code == 400
    assert refused.headers["Sec-WebSocket-Version"] == "13"
    assert set(refused.json()) == {"title", "description"}
    # Elsewhere an upgrade is an HTTP request like any other.
    other = requests.get(f"{embedded_service.url}/v2/queues", headers=upgrade, timeout=10)
    assert other.status_code == 400  # no project id, as over HTTP


def test_with_external_port_a_session_must_be_asked_for_at_that_port(tmp_path: Any) -> None:
    conf = tmp_path / "external.conf"
    conf.write_text("[drivers:transport:websocket]\nexternal_port = 443\n")
    service = ServiceProcess(args=["--config-file", str(conf)], workers=1).start()
    try:
        with pytest.raises(websocket.WebSocketBadStatusException) as refused:
            websocket.create_connection(ws_url(service), timeout=10)
        assert refused.value.status_code == 400
        assert b"external_port" in (refused.value.resp_body or b"")
        proxied = websocket.create_connection(
            ws_url(service), timeout=10, host="zaqar.example.com:443"
        )
        assert status(call(proxied, "queue_list", "p")) == 200
        proxied.close()
    finally:
        service.stop()


@pytest.fixture
def limited_service(tmp_path: Any) -> Iterator[tuple[ServiceProcess, int]]:
    """One worker holding two sessions, pinging after 1 s of silence, with Zaqar's extra
    WebSocket port; yields the server and that port."""
    extra_port = free_port()
    conf = tmp_path / "websocket.conf"
    conf.write_text(
        f"[drivers:transport:websocket]\nport = {extra_port}\nmax_sessions = 2\nping_interval = 1\n"
    )
    service = ServiceProcess(args=["--config-file", str(conf)], workers=1).start()
    yield service, extra_port
    service.stop()


def upgrade_raw(port: int) -> socket.socket:
    """A session opened by hand, on a socket that answers nothing afterwards."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    raw.sendall(
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += raw.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return raw


def test_a_silent_session_is_pinged_then_closed(
    limited_service: tuple[ServiceProcess, int],
) -> None:
    service, _ = limited_service
    raw = upgrade_raw(service.port)
    started = time.monotonic()
    frames = b""
    while True:
        chunk = raw.recv(4096)
        if not chunk:
            break
        frames += chunk
    waited = time.monotonic() - started
    # A ping (opcode 9) after the first silent second, then a close (8) with 1001.
    assert frames[0] == 0x89, frames
    ping_length = frames[1]
    close = frames[2 + ping_length :]
    assert close[0] == 0x88 and int.from_bytes(close[2:4], "big") == 1001, frames
    assert waited >= 1.5, waited
    raw.close()


def test_a_session_that_answers_pings_lives_on(
    limited_service: tuple[ServiceProcess, int],
) -> None:
    service, _ = limited_service
    ws = websocket.create_connection(ws_url(service), timeout=0.2)
    # Three idle intervals, reading: websocket-client answers each ping as it reads.
    deadline = time.monotonic() + 3.5
    while time.monotonic() < deadline:
        with pytest.raises(websocket.WebSocketTimeoutException):
            ws.recv()
    ws.settimeout(10)
    assert status(call(ws, "ping_node", "p")) == 204
    ws.close()


def test_sessions_beyond_the_limit_are_refused_503_and_the_extra_port_serves_them(
    limited_service: tuple[ServiceProcess, int],
) -> None:
    service, extra_port = limited_service
    first = websocket.create_connection(ws_url(service), timeout=10)
    second = websocket.create_connection(f"ws://127.0.0.1:{extra_port}/v2", timeout=10)
    assert status(call(second, "ping_node", "p")) == 204
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        websocket.create_connection(ws_url(service), timeout=10)
    assert refused.value.status_code == 503
    second.close()
    # The session ends when its close is read: then there is room again.
    deadline = time.monotonic() + 10
    while True:
        try:
            third = websocket.create_connection(ws_url(service), timeout=10)
            break
        except websocket.WebSocketBadStatusException:
            assert time.monotonic() < deadline, "the closed session kept its place"
            time.sleep(0.1)
    assert status(call(third, "ping_node", "p")) == 204
    third.close()
    first.close()


def test_a_session_subscribed_to_itself_is_notified_at_the_due_time_and_unsubscribed_at_close(
    embedded_service: ServiceProcess,
) -> None:
    project = f"p-{uuid.uuid4().hex[:8]}"
    embedded_service.wait_for_workers()
    ws = websocket.create_connection(ws_url(embedded_service), timeout=15)
    created = call(
        ws, "queue_create", project, queue_name="alarms", metadata={"_default_message_delay": 2}
    )
    assert status(created) == 201
    subscribed = call(ws, "subscription_create", project, queue_name="alarms", ttl=600)
    assert status(subscribed) == 201, subscribed
    assert subscribed["body"]["message"] == "Subscription alarms created."
    # Each post on a connection of its own, which the server hands to the worker holding
    # fewer connections: not the session's.
    sent_before: dict[int, float] = {}
    for n in range(4):
        sent_before[n] = time.time()
        answer = requests.post(
            f"{embedded_service.url}/v2/queues/alarms/messages",
            json={"messages": [{"body": {"n": n}}]},
            headers=headers(project),
            timeout=10,
        )
        assert answer.status_code == 201
    arrived: dict[int, float] = {}
    while len(arrived) < 4:
        notification = json.loads(ws.recv())
        assert notification["queue_name"] == "alarms"
        assert notification["Message_Type"] == "Notification"
        arrived[notification["body"]["n"]] = time.time()
    # Never before the due time (2 s after the post reached the server).
    assert all(arrived[n] - sent_before[n] >= 2.0 for n in range(4)), (sent_before, arrived)
    subscriptions_url = f"{embedded_service.url}/v2/queues/alarms/subscriptions"
    [listed] = requests.get(subscriptions_url, headers=headers(project), timeout=10).json()[
        "subscriptions"
    ]
    assert listed["subscriber"].startswith("zaqar-ws://127.0.0.1:")
    ws.close()
    deadline = time.monotonic() + 10
    while requests.get(subscriptions_url, headers=headers(project), timeout=10).json()[
        "subscriptions"
    ]:
        assert time.monotonic() < deadline, "the closed session's subscription stayed"
        time.sleep(0.1)


def test_a_client_cannot_name_a_session_subscriber(embedded_service: ServiceProcess) -> None:
    project = f"p-{uuid.uuid4().hex[:8]}"
    answer = requests.post(
        f"{embedded_service.url}/v2/queues/q/subscriptions",
        json={"subscriber": "zaqar-ws://127.0.0.1:1/" + "a" * 32},
        headers=headers(project),
        timeout=10,
    )
    assert answer.status_code == 400
    # Nor can it slip the environ entry in as a header.
    answer = requests.post(
        f"{embedded_service.url}/v2/queues/q/subscriptions",
        json={"ttl": 600},
        headers={**headers(project), "zaqar_delay.session_subscriber": "zaqar-ws://x:1/y"},
        timeout=10,
    )
    assert answer.status_code == 400
