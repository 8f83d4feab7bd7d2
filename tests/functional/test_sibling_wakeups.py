"""Wake-ups between the workers of a real server on Swift, a store that sends none: the master
makes a private directory for its workers' sockets, a worker with a waiting claim binds its
own there, and the directory goes with the master (``tests/unit/test_sibling_wakeups.py``
shows a write in one process waking a waiting claim in another)."""

from __future__ import annotations

import glob
import os
import signal
import threading
import uuid

import pytest
import requests

from testbed.processes import ServiceProcess, wait_until
from testbed.swift_aio import SwiftAllInOne
from zaqar_delay.conf import STORAGE_URI_ENV

pytestmark = pytest.mark.functional

HEADERS = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c", "X-Project-ID": "siblings"}


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
        wait_until(lambda: os.listdir(made[0]), 20, "a worker's socket")
        assert set(os.listdir(made[0])) <= {"0", "1"}
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
