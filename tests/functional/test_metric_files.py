"""Each worker's shared metric files are made whole before it serves
(``cmd/metric_files.py``): a full temporary directory costs the workers their shared
metrics, never their lives (prometheus-client writes its files through mmap, and a page a
full disk cannot back is a SIGBUS)."""

from __future__ import annotations

import glob
import http
import os
import re
import signal
import struct
import uuid

import pytest
import requests

from testbed.processes import ServiceProcess, wait_gone, wait_until
from tests.helpers.faults import HEADERS
from tests.helpers.small_disk import fill, small_tmpfs
from zaqar_delay.api.routes import ROUTES
from zaqar_delay.cmd.metric_files import RESERVED_BYTES

pytestmark = [pytest.mark.functional, pytest.mark.faults]


def metric_files(tmpdir: str) -> list[str]:
    return sorted(glob.glob(os.path.join(tmpdir, "zaqar-delay-metrics-*", "*.db")))


def test_a_worker_started_on_a_full_temporary_directory_serves() -> None:
    with small_tmpfs("16m") as tmpdir:
        service = ServiceProcess(env={"TMPDIR": tmpdir}).start().wait_for_workers()
        try:
            workers = service.worker_pids()
            assert len(workers) == 2
            fill(tmpdir)
            os.kill(workers[0], signal.SIGKILL)
            wait_gone([workers[0]])
            # The dead worker's files stay, cut down to what they hold.
            dead = [path for path in metric_files(tmpdir) if path.endswith(f"_{workers[0]}.db")]
            assert len(dead) == len(RESERVED_BYTES)
            wait_until(lambda: all(os.path.getsize(path) < 65536 for path in dead), 10, "files cut")
            wait_until(
                lambda: service.log().count("Worker serving") >= 3, 30, "a new worker serving"
            )
            for n in range(40):  # through both workers
                posted = requests.post(
                    f"{service.url}/v2/queues/full-tmp/messages",
                    json={"messages": [{"body": n}]},
                    headers={**HEADERS, "X-Project-ID": f"p{n}"},
                    timeout=30,
                )
                assert posted.status_code == 201, posted.text
            assert requests.get(f"{service.url}/metrics", timeout=30).status_code == 200
            log = service.log()
            assert "keeps its metrics to itself" in log
            assert "SIGBUS" not in log
            assert len(service.worker_pids()) == 2
        finally:
            service.stop()


def test_a_worker_s_files_are_allocated_whole_and_the_bounded_series_fit() -> None:
    tmpdir = os.environ.get("TMPDIR", "/tmp")
    service = ServiceProcess(workers=1).start().wait_for_workers()
    try:
        [worker] = service.worker_pids()
        files = {
            os.path.basename(path).split("_")[0]: path
            for path in metric_files(tmpdir)
            if path.endswith(f"_{worker}.db")
        }
        assert set(files) == set(RESERVED_BYTES)
        for kind, path in files.items():
            stat = os.stat(path)
            assert stat.st_size == RESERVED_BYTES[kind]
            assert stat.st_blocks * 512 >= RESERVED_BYTES[kind], "allocated, not sparse"
        # Every method on every route: the most request-duration series one worker keeps.
        methods = [*(m.value for m in http.HTTPMethod), "FOO"]
        session = requests.Session()
        for route in ROUTES:
            path = re.sub(r"\{[^}]+\}", "x1", route.template)
            for method in methods:
                headers = {**HEADERS, "Client-ID": str(uuid.uuid4())}
                session.request(method, service.url + path, headers=headers, timeout=30)
        for kind, path in files.items():
            with open(path, "rb") as f:
                used = struct.unpack("i", f.read(4))[0]
            assert 2 * used <= RESERVED_BYTES[kind], (kind, used)
            assert os.path.getsize(path) == RESERVED_BYTES[kind], "the file never grew"
    finally:
        service.stop()
