"""A topic through the real server (gunicorn, two workers): a webhook that fails 30% of its
requests and a WebSocket session, both subscribed, each get each delayed message once, at its
due time and never before."""

from __future__ import annotations

import json
import pathlib
import threading
import time
import uuid

import pytest
import requests
import websocket

from testbed.processes import RedisServer, ServiceProcess
from testbed.receiver import receiver
from zaqar_delay.conf import STORAGE_URI_ENV

pytestmark = pytest.mark.functional

CLIENT_ID = "3381af92-2b9e-11e3-b191-71861300734c"
MESSAGES = 30
DELAY_S = 2


def test_a_webhook_and_a_session_each_get_each_delayed_message_once(
    embedded_service: ServiceProcess,
) -> None:
    project = f"p-{uuid.uuid4().hex[:8]}"
    headers = {"Client-ID": CLIENT_ID, "X-Project-ID": project}
    topic = f"{embedded_service.url}/v2/topics/alerts"
    embedded_service.wait_for_workers()
    created = requests.put(
        topic, json={"_default_message_delay": DELAY_S}, headers=headers, timeout=10
    )
    assert created.status_code == 201, created.text
    # Three failures in every ten requests, never two in a row: Zaqar's default retry policy
    # retries at once.
    failing = [503 if i % 10 in (1, 4, 7) else 200 for i in range(3 * MESSAGES)]
    session = websocket.create_connection(f"ws://127.0.0.1:{embedded_service.port}/", timeout=15)
    with receiver(statuses=failing) as hook:
        subscribed = requests.post(
            f"{topic}/subscriptions",
            json={"subscriber": hook.url, "ttl": 3600},
            headers=headers,
            timeout=10,
        )
        assert subscribed.status_code == 201, subscribed.text
        frame = {
            "action": "subscription_create",
            "headers": headers,
            "body": {"topic_name": "alerts", "ttl": 600},
        }
        session.send(json.dumps(frame))
        answer = json.loads(session.recv())
        assert answer["headers"]["status"] == 201, answer
        notified: dict[int, list[float]] = {}

        def read_notifications() -> None:
            while sum(len(times) for times in notified.values()) < MESSAGES:
                note = json.loads(session.recv())
                assert note["queue_name"] == "alerts"
                notified.setdefault(note["body"]["n"], []).append(time.time())

        reader = threading.Thread(target=read_notifications, daemon=True)
        reader.start()
        posted_at: dict[int, float] = {}
        for n in range(MESSAGES):
            posted_at[n] = time.time()
            answer = requests.post(
                f"{topic}/messages",
                json={"messages": [{"body": {"n": n}}]},
                headers=headers,
                timeout=10,
            )
            assert answer.status_code == 201, answer.text
        reader.join(timeout=60)
        assert not reader.is_alive(), f"{len(notified)} of {MESSAGES} notifications arrived"
        deadline = time.monotonic() + 60
        while sum(r.status == 200 for r in hook.received) < MESSAGES:
            assert time.monotonic() < deadline, "not every push was delivered"
            time.sleep(0.05)
        time.sleep(1)  # a push sent twice would arrive within this
        failed = [r for r in hook.received if r.status != 200]
        delivered = [r for r in hook.received if r.status == 200]
        # The receiver did refuse pushes, and every message was still delivered once.
        assert failed, "no push was refused"
        by_message = sorted(r.json()["body"]["n"] for r in delivered)
        assert by_message == list(range(MESSAGES))
        assert sorted(notified) == list(range(MESSAGES))
        assert all(len(times) == 1 for times in notified.values()), notified
        for push in hook.received:
            n = push.json()["body"]["n"]
            assert push.at_ns / 1e9 >= posted_at[n] + DELAY_S, "pushed before it was due"
        for n, [at] in notified.items():
            assert at >= posted_at[n] + DELAY_S, "notified before it was due"
        print(f"{len(failed)} refused pushes retried; {len(delivered)} delivered")
    session.close()


def test_a_session_on_one_server_is_notified_by_another_server_s_dispatcher(
    redis_server: RedisServer, tmp_path: pathlib.Path
) -> None:
    """Server A holds the session and sends no pushes ([notification] push = false); server B,
    on the same store, takes the post and pushes it to A's relay at the due time."""
    quiet = tmp_path / "no-push.conf"
    quiet.write_text("[notification]\npush = false\n")
    env = {STORAGE_URI_ENV: redis_server.url}
    holder = ServiceProcess(env=env, args=["--config-file", str(quiet)], workers=1).start()
    pusher = ServiceProcess(env=env, workers=1).start()
    try:
        project = f"p-{uuid.uuid4().hex[:8]}"
        headers = {"Client-ID": CLIENT_ID, "X-Project-ID": project}
        # A delayed topic (on one without _default_message_delay a message's delay is ignored,
        # as in Zaqar).
        created = requests.put(
            f"{pusher.url}/v2/topics/relay",
            json={"_default_message_delay": 1},
            headers=headers,
            timeout=10,
        )
        assert created.status_code == 201, created.text
        session = websocket.create_connection(f"ws://127.0.0.1:{holder.port}/", timeout=15)
        frame = {
            "action": "subscription_create",
            "headers": headers,
            "body": {"topic_name": "relay", "ttl": 600},
        }
        session.send(json.dumps(frame))
        assert json.loads(session.recv())["headers"]["status"] == 201
        posted_at = time.time()
        posted = requests.post(
            f"{pusher.url}/v2/topics/relay/messages",
            json={"messages": [{"body": "across", "delay": DELAY_S}]},
            headers=headers,
            timeout=10,
        )
        assert posted.status_code == 201, posted.text
        note = json.loads(session.recv())
        arrived = time.time()
        assert note["body"] == "across" and note["queue_name"] == "relay"
        assert arrived >= posted_at + DELAY_S, "notified before it was due"
        # The holder pushed nothing: the notification came from the other server.
        # The holder sends no pushes at all ([notification] push = false): the notification
        # came from the other server's dispatcher.
        counted = "zaqar_delay_push_attempts_total{"
        assert counted not in requests.get(f"{holder.url}/metrics", timeout=10).text
        session.close()
    finally:
        holder.stop()
        pusher.stop()
