"""The sample ``etc/uwsgi.ini`` serves the API through ``zaqar_delay.api.wsgi:application``:
started as the file's header says, on a redis-server, and stopped by SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import requests

from testbed.processes import RedisServer, free_port, wait_until

pytestmark = pytest.mark.functional

ROOT = Path(__file__).resolve().parents[2]
HEADERS = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c", "X-Project-ID": "p"}


def test_the_sample_uwsgi_ini_serves_the_api(tmp_path: Path, redis_server: RedisServer) -> None:
    uwsgi = Path(sys.executable).with_name("uwsgi")
    assert uwsgi.exists(), "pyuwsgi (test-requirements.txt) installs uwsgi beside python"
    conf = tmp_path / "zaqar-delay.conf"
    conf.write_text(f"[storage]\nuri = {redis_server.url}\nkey_prefix = uw{uuid.uuid4().hex[:8]}\n")
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
        assert server.wait(30) == 0  # die-on-term: a clean exit
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    text = log_path.read_text(errors="replace")
    assert "Traceback" not in text, text
