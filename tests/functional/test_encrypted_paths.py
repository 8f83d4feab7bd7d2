"""The paths into an encrypted queue that run outside the server's own responders, against a
real server on its embedded store (which keeps a message key in its data directory): the
Spark pipeline's poster and the dashboard's move-back of a dead letter. Each reaches the
consumer with the plain body while the store holds only sealed ones."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import requests

from testbed.processes import ServiceProcess
from tests.helpers.stores import redis_values_text
from zaqar_delay.conf import Limits
from zaqar_delay.pipeline import rows
from zaqar_delay.pipeline.client import Poster, Target

pytestmark = pytest.mark.functional

PROJECT = "sealed-paths"
SECRET = "iban-DE89370400440532013000"
HEADERS = {"Client-ID": str(uuid.uuid4()), "X-Project-ID": PROJECT}


@pytest.fixture(scope="module")
def server() -> Iterator[ServiceProcess]:
    service = ServiceProcess(workers=1).start()
    yield service
    service.stop()


def call(server: ServiceProcess, method: str, path: str, **kwargs: Any) -> requests.Response:
    return requests.request(method, server.url + path, headers=HEADERS, timeout=10, **kwargs)


def store_text(server: ServiceProcess) -> str:
    """Every string and hash value the embedded store holds, as text."""
    client = redis.Redis(unix_socket_path=os.path.join(server.data_dir, "redis.sock"))
    try:
        return redis_values_text(client)
    finally:
        client.close()


def sealed_queue(server: ServiceProcess, name: str, **metadata: Any) -> None:
    created = call(
        server, "PUT", f"/v2/queues/{name}", json={"_enable_encrypt_messages": True, **metadata}
    )
    assert created.status_code == 201, created.text


def claimed_bodies(server: ServiceProcess, queue: str) -> list[Any]:
    claimed = call(server, "POST", f"/v2/queues/{queue}/claims", params={"limit": 10})
    assert claimed.status_code == 201, claimed.text
    return [m["body"] for m in claimed.json()["messages"]]


def test_the_pipeline_s_posts_are_sealed_and_read_back_plain(server: ServiceProcess) -> None:
    sealed_queue(server, "scheduled")
    raw = {"queue": "scheduled", "body": f'{{"account": "{SECRET}"}}', "delay": "0"}
    prepared = rows.prepare(raw, PROJECT, Limits(), 0)
    assert isinstance(prepared, rows.Prepared), prepared
    poster = Poster(Target(server.url, PROJECT))
    try:
        [outcome] = poster.post([prepared])
    finally:
        poster.close()
    assert outcome.status == "scheduled", outcome
    # A control: the raw read does see the bodies of a queue that is not encrypted.
    control = {"messages": [{"body": "visible-plaintext"}]}
    assert call(server, "POST", "/v2/queues/plain/messages", json=control).status_code == 201
    text = store_text(server)
    assert "visible-plaintext" in text
    assert SECRET not in text
    assert claimed_bodies(server, "scheduled") == [{"account": SECRET}]


def test_the_dashboard_s_move_back_keeps_a_dead_letter_sealed(server: ServiceProcess) -> None:
    sealed_queue(server, "dead")
    sealed_queue(server, "work", _dead_letter_queue="dead", _max_claim_count=1)
    assert (
        call(
            server, "POST", "/v2/queues/work/messages", json={"messages": [{"body": SECRET}]}
        ).status_code
        == 201
    )
    first = call(server, "POST", "/v2/queues/work/claims", params={"ttl": 60, "grace": 60})
    assert first.status_code == 201
    call(server, "DELETE", first.headers["Location"])  # released: claimed once, so next it dies
    assert call(server, "POST", "/v2/queues/work/claims").status_code == 204
    # What the dashboard sends to move it back (dashboard.js moveBack): list the dead-letter
    # queue, post a copy to the source with a dedup id from its id, delete the dead letter.
    listed = call(
        server,
        "GET",
        "/v2/queues/dead/messages",
        params={"include_delayed": "true", "echo": "true"},
    )
    [dead] = listed.json()["messages"]
    assert dead["body"] == SECRET
    copy = {"body": dead["body"], "ttl": dead["ttl"], "dedup_id": f"redrive-dead-{dead['id']}"}
    moved = call(server, "POST", "/v2/queues/work/messages", json={"messages": [copy]})
    assert moved.status_code == 201, moved.text
    assert call(server, "DELETE", f"/v2/queues/dead/messages/{dead['id']}").status_code == 204
    assert SECRET not in store_text(server)
    assert claimed_bodies(server, "work") == [SECRET]
