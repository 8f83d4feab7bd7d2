"""The sample ``etc/uwsgi.ini`` serves the API through ``zaqar_delay.api.wsgi:application``:
started as the file's header says, on a redis-server, and stopped by SIGTERM."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
import requests

from testbed.processes import RedisServer, ServiceProcess, free_port, wait_until
from testbed.receiver import receiver
from tests.helpers.push import last_outcome

pytestmark = pytest.mark.functional

ROOT = Path(__file__).resolve().parents[2]
HEADERS = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c", "X-Project-ID": "p"}
# Longer than the test takes to see the claims waiting, ask the rest of the server and post.
WAIT_S = 8


def write_config(tmp_path: Path, redis_server: RedisServer) -> Path:
    conf = tmp_path / "zaqar-delay.conf"
    conf.write_text(f"[storage]\nuri = {redis_server.url}\nkey_prefix = uw{uuid.uuid4().hex[:8]}\n")
    return conf


@contextmanager
def uwsgi_server(
    tmp_path: Path, redis_server: RedisServer
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """uWSGI from the sample file, its app on ``redis_server`` (with ``tmp_path``'s
    zaqar-delay.conf, written when missing); the log checked for tracebacks once it is
    stopped."""
    uwsgi = Path(sys.executable).with_name("uwsgi")
    assert uwsgi.exists(), "pyuwsgi (test-requirements.txt) installs uwsgi beside python"
    conf = tmp_path / "zaqar-delay.conf"
    if not conf.exists():
        write_config(tmp_path, redis_server)
    port = free_port()
    env = {
        **os.environ,
        "ZAQAR_DELAY_CONFIG_FILE": str(conf),
        "ZAQAR_DELAY_BIND": f"127.0.0.1:{port}",
    }
    log_path = tmp_path / "uwsgi.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [str(uwsgi), "--ini", str(ROOT / "etc" / "uwsgi.ini")],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: requests.get(url + "/", timeout=1).status_code == 300, 30, "uwsgi")
        yield server, url
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    text = log_path.read_text(errors="replace")
    assert "Traceback" not in text, text


def test_the_sample_uwsgi_ini_serves_the_api(tmp_path: Path, redis_server: RedisServer) -> None:
    with uwsgi_server(tmp_path, redis_server) as (server, url):
        posted = requests.post(
            url + "/v2/queues/q/messages",
            json={"messages": [{"body": {"n": 1}, "ttl": 300}]},
            headers=HEADERS,
            timeout=10,
        )
        assert posted.status_code == 201, posted.text
        assert posted.headers["x-openstack-request-id"].startswith("req-")
        claimed = requests.post(
            url + "/v2/queues/q/claims", json={"ttl": 60}, headers=HEADERS, timeout=10
        )
        assert claimed.status_code == 201, claimed.text
        assert [m["body"] for m in claimed.json()["messages"]] == [{"n": 1}]
        assert requests.get(url + "/healthcheck", timeout=10).status_code == 200
        server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0  # a clean exit


def waiting_claim(url: str, queue: str) -> requests.Response:
    return requests.post(
        f"{url}/v2/queues/{queue}/claims?wait={WAIT_S}",
        json={"ttl": 60},
        headers=HEADERS,
        timeout=WAIT_S + 30,
    )


def test_under_uwsgi_waiting_claims_hold_no_worker_and_a_stop_answers_them(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """More claims wait than uWSGI has worker processes, and the server still answers; a post
    wakes the claim waiting on its queue; SIGTERM lets the others answer instead of cutting
    them."""
    queues = [f"wait-{n}" for n in range(3)]
    client = redis.Redis(redis_server.host, redis_server.port)

    def all_waiting() -> bool:
        return all(client.keys(f"*{{p/{queue}}}:w") for queue in queues)

    with (
        uwsgi_server(tmp_path, redis_server) as (server, url),
        concurrent.futures.ThreadPoolExecutor(len(queues)) as pool,
    ):
        claims = [pool.submit(waiting_claim, url, queue) for queue in queues]
        wait_until(all_waiting, 10, "three claims waiting in two worker processes")
        assert requests.get(url + "/v2/ping", headers=HEADERS, timeout=10).status_code == 204
        assert not any(claim.done() for claim in claims), "answered only once a claim ended"
        posted = requests.post(
            f"{url}/v2/queues/{queues[0]}/messages",
            json={"messages": [{"body": "wake"}]},
            headers=HEADERS,
            timeout=10,
        )
        assert posted.status_code == 201, posted.text
        woken = claims[0].result()
        assert woken.status_code == 201, woken.text
        assert [m["body"] for m in woken.json()["messages"]] == ["wake"]
        assert not any(claim.done() for claim in claims[1:]), "stopped after the claims ended"
        server.send_signal(signal.SIGTERM)
        assert server.wait(WAIT_S + 30) == 0
        assert [claim.result().status_code for claim in claims[1:]] == [204, 204]


def test_a_push_in_flight_when_uwsgi_stops_is_recorded(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """The worker's exit stops its dispatcher, which waits for the push in flight and records
    its outcome (not sent again when its lease ends)."""
    conf = write_config(tmp_path, redis_server)
    with receiver(hold=True) as hook, uwsgi_server(tmp_path, redis_server) as (server, url):
        subscribed = requests.post(
            f"{url}/v2/queues/hooked/subscriptions",
            json={"subscriber": hook.url, "ttl": 3600},
            headers=HEADERS,
            timeout=10,
        )
        assert subscribed.status_code == 201, subscribed.text
        posted = requests.post(
            f"{url}/v2/queues/hooked/messages",
            json={"messages": [{"body": "pushed"}]},
            headers=HEADERS,
            timeout=10,
        )
        assert posted.status_code == 201, posted.text
        hook.wait_for(1)
        with hook.lock:
            assert hook.in_flight == 1, "the push is not in flight"
        server.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(1.5)
        hook.answering.set()
        assert server.wait(30) == 0
    service = ServiceProcess(args=["--config-file", str(conf)]).start()
    try:
        assert last_outcome(service.url, "hooked", HEADERS) == "delivered"
    finally:
        service.stop()
