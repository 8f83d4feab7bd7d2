"""Wake-ups between the workers of a real server on Swift, a store that sends none: the master
makes a private directory for its workers' sockets, a worker with a waiting claim binds its
own there, and the directory goes with the master, or with the next master when it was killed
(``tests/unit/test_sibling_wakeups.py`` shows a write in one process waking a waiting claim in
another)."""

from __future__ import annotations

import glob
import os
import signal
import threading
import uuid

import pytest
import requests

from testbed.processes import RedisServer, ServiceProcess, is_gone, wait_until
from testbed.swift_aio import SwiftAllInOne
from zaqar_delay import master_directories
from zaqar_delay.conf import STORAGE_URI_ENV

pytestmark = pytest.mark.functional

HEADERS = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c", "X-Project-ID": "siblings"}


def sockets(directory: str) -> set[str]:
    """The workers' sockets in their directory (without the master's lock)."""
    return set(os.listdir(directory)) - {master_directories.LOCK_NAME}


def test_workers_on_swift_share_a_directory_of_wake_up_sockets(
    swift_aio: SwiftAllInOne, short_tmp: str
) -> None:
    # The server's TMPDIR is short, for its workers' sockets.
    env = {STORAGE_URI_ENV: swift_aio.store_uri, "TMPDIR": short_tmp}
    server = ServiceProcess(env=env, workers=2).start().wait_for_workers()
    try:
        made = glob.glob(os.path.join(short_tmp, "zaqar-delay-workers-*"))
        assert len(made) == 1 and os.stat(made[0]).st_mode & 0o777 == 0o700
        queue = f"{server.url}/v2/queues/q-{uuid.uuid4().hex[:8]}"
        assert requests.put(queue, json={}, headers=HEADERS, timeout=30).status_code == 201
        answers: list[requests.Response] = []
        waiter = threading.Thread(
            target=lambda: answers.append(
                requests.post(
                    f"{queue}/claims?wait=20&limit=1",
                    json={"ttl": 60, "grace": 60},
                    headers=HEADERS,
                    timeout=60,
                )
            )
        )
        waiter.start()
        wait_until(lambda: sockets(made[0]), 20, "a worker's socket")
        assert sockets(made[0]) <= {"0", "1"}
        posted = requests.post(
            f"{queue}/messages", json={"messages": [{"body": "b"}]}, headers=HEADERS, timeout=30
        )
        assert posted.status_code == 201
        waiter.join(60)
        assert answers[0].status_code == 201
        assert [m["body"] for m in answers[0].json()["messages"]] == ["b"]
    finally:
        assert server.process is not None
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(30)
        server.stop()
    assert not os.path.exists(made[0])


def test_a_killed_servers_directories_are_removed_by_the_next_server(
    redis_server: RedisServer, short_tmp: str
) -> None:
    env = {STORAGE_URI_ENV: redis_server.url, "TMPDIR": short_tmp}
    patterns = [os.path.join(short_tmp, f"zaqar-delay-{kind}-*") for kind in ("metrics", "workers")]
    crashed = ServiceProcess(env=env, workers=2).start().wait_for_workers()
    left = [glob.glob(pattern) for pattern in patterns]
    assert [len(found) for found in left] == [1, 1]
    tree = crashed.kill()
    assert all(is_gone(pid) for pid in tree)
    assert all(os.path.isdir(found[0]) for found in left)  # nobody ran the master's exit
    server = ServiceProcess(env=env, workers=2).start().wait_for_workers()
    try:
        made = [glob.glob(pattern) for pattern in patterns]
        assert [len(found) for found in made] == [1, 1]
        assert not any(os.path.exists(found[0]) for found in left)
        assert requests.get(f"{server.url}/v2/ping", headers=HEADERS, timeout=30).status_code == 204
    finally:
        server.stop()
    assert not any(os.path.exists(found[0]) for found in made)
