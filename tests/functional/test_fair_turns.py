"""Turns at work shared between projects, against a real server with one worker and one turn
(``[server] max_active_requests = 1``; admission.py, api/turns.py):

- while one project's request holds the turn (its store frozen under it) and more of that
  project's wait, another project's request that arrives last is served next;
- clients that send their bodies slowly hold no turn: the server receives a body before
  the request's turn.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from testbed.processes import RedisServer, ServiceProcess, process_state, wait_until
from tests.helpers.raw_http import server_has_read
from zaqar_delay.conf import STORAGE_URI_ENV

pytestmark = pytest.mark.functional

CLIENT = "3381af92-2b9e-11e3-b191-71861300734c"
POST = "POST /v2/queues/turns/messages HTTP/1.1"


def headers(project: str) -> dict[str, str]:
    return {"Client-ID": CLIENT, "X-Project-ID": project}


def one_turn_server(tmp_path: Path, store: RedisServer | None = None) -> ServiceProcess:
    conf = tmp_path / "turns.conf"
    conf.write_text(
        "[server]\nmax_active_requests = 1\n"
        f"[journal]\npath = {tmp_path / 'journal'}\n"
        # Requests wait on the frozen store rather than fail.
        "[storage]\nsocket_timeout = 60\n"
    )
    env = {STORAGE_URI_ENV: store.url} if store is not None else {}
    return ServiceProcess(env=env, args=["--config-file", str(conf)], workers=1).start()


@pytest.fixture
def store() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGCONT)
    server.stop()


def sent(
    service: ServiceProcess, head: str, project: str, body: bytes, length: int
) -> socket.socket:
    """A connection that sent ``head`` (a request line) for ``project`` with ``body``,
    declared ``length`` bytes long, once the server has read all of it."""
    lines = [
        head,
        "Host: q",
        "Content-Type: application/json",
        f"Content-Length: {length}",
        *(f"{k}: {v}" for k, v in headers(project).items()),
    ]
    client = socket.create_connection(("127.0.0.1", service.port), timeout=30)
    client.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    wait_until(lambda: server_has_read(service.port, client), 10, "the server reads it")
    return client


def post_one(service: ServiceProcess, project: str, body: str, timeout: float) -> None:
    """Post one message to ``project``'s queue, answered 201 within ``timeout`` seconds."""
    posted = requests.post(
        f"{service.url}/v2/queues/turns/messages",
        json={"messages": [{"ttl": 300, "body": body}]},
        headers=headers(project),
        timeout=timeout,
    )
    assert posted.status_code == 201, posted.text


def sent_post(service: ServiceProcess, project: str) -> socket.socket:
    """A connection that sent a post of one message to ``project``'s queue."""
    document = json.dumps({"messages": [{"ttl": 300, "body": project}]}).encode()
    return sent(service, POST, project, document, len(document))


def unanswered(client: socket.socket) -> bool:
    """Whether nothing has come back on ``client`` yet (neither bytes nor a close)."""
    return not select.select([client], [], [], 0)[0]


def status_of(client: socket.socket) -> int:
    received = b""
    while b"\r\n" not in received:
        chunk = client.recv(4096)
        assert chunk, "closed without an answer"
        received += chunk
    return int(received.split()[1])


def posted_projects(journal: Path) -> list[str]:
    events = [
        json.loads(line)
        for path in sorted(journal.glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    return [event["project"] for event in events if event["event"] == "posted"]


def test_another_projects_request_takes_the_next_turn_ahead_of_a_backlog(
    tmp_path: Path, store: RedisServer
) -> None:
    service = one_turn_server(tmp_path, store)
    try:
        for project in ("hostile", "calm"):  # the store's scripts and connections are ready
            post_one(service, project, "warm", 10)
        assert store.process is not None
        os.kill(store.process.pid, signal.SIGSTOP)
        pid = store.process.pid
        wait_until(lambda: process_state(pid) == "T", 10, "the store stops")  # answers nothing

        holding = sent_post(service, "hostile")  # takes the turn, and waits on the store
        backlog = [sent_post(service, "hostile") for _ in range(3)]
        last = sent_post(service, "calm")
        for client in (holding, *backlog, last):
            assert unanswered(client)  # nothing is answered while the store is frozen

        os.kill(store.process.pid, signal.SIGCONT)
        assert all(status_of(client) == 201 for client in (holding, *backlog, last))
        order = posted_projects(tmp_path / "journal")[2:]
        assert order == ["hostile", "calm", "hostile", "hostile", "hostile"], order
    finally:
        service.stop()


def test_clients_sending_bodies_slowly_hold_no_turn(tmp_path: Path) -> None:
    service = one_turn_server(tmp_path)
    try:
        # 1 byte of 100 each
        slow = [sent(service, POST, "slow", b"{", 100) for _ in range(3)]
        for client in slow:
            assert unanswered(client)  # the server waits for their bodies

        # Within the transfer timeout (60 s) a body being received would hold the one turn.
        post_one(service, "calm", "calm", 20)
        for client in slow:
            assert unanswered(client)
            client.close()
    finally:
        service.stop()


def test_a_claim_waiting_for_messages_holds_no_turn(tmp_path: Path) -> None:
    service = one_turn_server(tmp_path)
    try:
        created = requests.put(f"{service.url}/v2/queues/turns", headers=headers("w"), timeout=10)
        assert created.status_code == 201, created.text
        document = b'{"ttl": 60, "grace": 60}'
        head = "POST /v2/queues/turns/claims?wait=20 HTTP/1.1"
        claim = sent(service, head, "w", document, len(document))
        assert unanswered(claim)  # it waits: the queue is empty

        # Were the claim to keep its turn while it waits, this would wait 20 s for it.
        post_one(service, "w", "for the claim", 10)
        assert status_of(claim) == 201  # it took a turn again, and the message
    finally:
        service.stop()
