"""A server stopped with SIGTERM (a deploy, a restart, gunicorn's reload) on real gunicorn.

Each worker answers the claims waiting in it, closes the connections that wait for a request
and its WebSocket sessions (1001, going away), then exits by itself: it is not killed at
gunicorn's graceful timeout with the waiting claims cut and the connections reset.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import signal
import time
from collections.abc import Iterator

import pytest
import redis
import requests
import websocket

from testbed.processes import RedisServer, ServiceProcess
from zaqar_delay.conf import STORAGE_URI_ENV

pytestmark = pytest.mark.functional

HEADERS = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c", "X-Project-ID": "graceful"}
QUEUES = ("q1", "q2", "q3")
WORKERS = 2
# The longest wait a claim may ask for: longer than gunicorn's graceful timeout (15 s), past
# which the master kills a worker that has not exited.
WAIT_S = 20


@pytest.fixture
def service(redis_server: RedisServer) -> Iterator[ServiceProcess]:
    redis.Redis(redis_server.host, redis_server.port).flushall()
    service = ServiceProcess(env={STORAGE_URI_ENV: redis_server.url}, workers=WORKERS)
    service.start().wait_for_workers()
    yield service
    service.stop()


def terminate(service: ServiceProcess) -> None:
    assert service.process is not None
    service.process.send_signal(signal.SIGTERM)


def exited_by_itself(service: ServiceProcess) -> None:
    """The server exits with 0, each worker by itself (not killed by the master at the
    graceful timeout)."""
    assert service.process is not None
    assert service.process.wait(60) == 0
    service.process = None
    log = service.log()
    assert log.count("Worker exiting") == WORKERS, log
    assert "graceful timeout" not in log, log


def waiting_claim(service: ServiceProcess, queue: str) -> requests.Response:
    return requests.post(
        f"{service.url}/v2/queues/{queue}/claims?wait={WAIT_S}",
        json={"ttl": 60},
        headers=HEADERS,
        timeout=WAIT_S + 30,
    )


def announced(redis_server: RedisServer, queue: str) -> bool:
    """Whether a server holds a claim waiting on ``queue`` (it asks writers to wake it)."""
    client = redis.Redis(redis_server.host, redis_server.port)
    return bool(client.keys(f"*{{graceful/{queue}}}:w"))


def test_a_stopping_server_answers_its_waiting_claims_and_closes_idle_connections(
    service: ServiceProcess, redis_server: RedisServer
) -> None:
    # A client's pooled connection: kept alive between requests, idle when the stop comes.
    pooled = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
    for _ in range(2):
        pooled.request("GET", "/v2/ping", headers=HEADERS)
        response = pooled.getresponse()
        response.read()
        assert response.status == 204
    assert pooled.sock is not None, "the server did not keep the connection alive"
    with concurrent.futures.ThreadPoolExecutor(len(QUEUES)) as pool:
        claims = [pool.submit(waiting_claim, service, queue) for queue in QUEUES]
        deadline = time.monotonic() + 30
        while not all(announced(redis_server, queue) for queue in QUEUES):
            assert time.monotonic() < deadline, "the claims are not waiting in the server"
            assert not any(claim.done() for claim in claims), "a claim did not wait"
            time.sleep(0.05)

        terminate(service)
        exited_by_itself(service)
        answers = [claim.result(30) for claim in claims]  # a cut claim raises ConnectionError
    assert [answer.status_code for answer in answers] == [204] * len(QUEUES)
    assert all(answer.headers.get("Connection") == "close" for answer in answers)
    assert pooled.sock.recv(1) == b"", "the idle connection was left open"


def test_a_stopping_server_closes_its_websocket_sessions_going_away(
    service: ServiceProcess,
) -> None:
    session = websocket.create_connection(f"ws://127.0.0.1:{service.port}/", timeout=30)
    session.send(json.dumps({"action": "queue_list", "headers": HEADERS, "body": {}}))
    assert json.loads(session.recv())["headers"]["status"] == 200
    terminate(service)
    # A session cut without a close frame raises WebSocketConnectionClosedException here.
    opcode, data = session.recv_data(control_frame=True)  # answers the close, as clients do
    assert opcode == websocket.ABNF.OPCODE_CLOSE
    assert int.from_bytes(data[:2], "big") == 1001, data
    exited_by_itself(service)
