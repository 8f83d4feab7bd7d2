"""Fault legs: a load of posts and claims on a real server, and the stores they kill."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import requests

from testbed.processes import RedisServer, SecantusServer
from testbed.swift_aio import SwiftAllInOne

BATCH = 5
# A request must be answered within this many seconds even while the store is gone.
ANSWER_BOUND_S = 12
# The Swift servers an outage kills: the object server, which holds the data, and the proxy,
# the entry point. They start again in that order (SwiftAllInOne.restart says why).
SWIFT_OUTAGE = ("object", "proxy")

HEADERS = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c", "X-Project-ID": "faults"}


@dataclass
class Load:
    """Posts batches of BATCH messages from a few threads until stopped; records outcomes."""

    base_url: Callable[[], str]  # where the server is now
    queue: str
    acked: list[str] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    answered_at: list[float] = field(default_factory=list)  # time.monotonic() of each status
    slowest_s: float = 0.0
    connection_errors: int = 0
    bad_errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, threads: int = 3) -> list[threading.Thread]:
        workers = [threading.Thread(target=self._post_loop, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        return workers

    def _post_loop(self, index: int) -> None:
        session = requests.Session()
        n = 0
        while not self.stop.is_set():
            n += 1
            body = {"messages": [{"body": [index, n, k], "ttl": 3600} for k in range(BATCH)]}
            started = time.monotonic()
            try:
                response = session.post(
                    f"{self.base_url()}/v2/queues/{self.queue}/messages",
                    json=body,
                    headers=HEADERS,
                    timeout=ANSWER_BOUND_S + 5,
                )
            except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError):
                # Refused, or cut off mid-answer by the kill: not acknowledged either way.
                with self.lock:
                    self.connection_errors += 1
                time.sleep(0.05)
                continue
            elapsed = time.monotonic() - started
            with self.lock:
                self.slowest_s = max(self.slowest_s, elapsed)
                self.statuses.append(response.status_code)
                self.answered_at.append(time.monotonic())
                if response.status_code == 201:
                    self.acked += [h.rsplit("/", 1)[1] for h in response.json()["resources"]]
                elif response.status_code == 503:
                    document = response.json()
                    if not (document.get("title") and document.get("description")):
                        self.bad_errors.append(response.text)
                    time.sleep(0.05)
                else:
                    self.bad_errors.append(f"{response.status_code} {response.text}")


def stored_ids(
    url: str, queue: str, ids: list[str], headers: dict[str, str] | None = None
) -> set[str]:
    """Those of ``ids`` still in the queue, 20 per request (a page's most), with literal
    commas (an encoded one would not split the ids)."""
    found: set[str] = set()
    for start in range(0, len(ids), 20):
        chunk = ",".join(ids[start : start + 20])
        response = requests.get(
            f"{url}/v2/queues/{queue}/messages?ids={chunk}",
            headers=headers or HEADERS,
            timeout=30,
        )
        assert response.status_code in (200, 404), response.text  # 404: none of them
        if response.status_code == 200:
            found |= {m["id"] for m in response.json()["messages"]}
    return found


def total(url: str, queue: str) -> int:
    response = requests.get(f"{url}/v2/queues/{queue}/stats", headers=HEADERS, timeout=30)
    assert response.status_code == 200, response.text
    return int(response.json()["messages"]["total"])


@dataclass
class Store:
    """A durable store process that can be killed and started again on its data."""

    server: RedisServer | SecantusServer | SwiftAllInOne
    uri: str

    def kill(self) -> None:
        if isinstance(self.server, SwiftAllInOne):
            self.server.kill(SWIFT_OUTAGE)  # fails unless each died of SIGKILL
        else:
            self.server.kill()

    def start(self) -> None:
        if isinstance(self.server, SwiftAllInOne):
            for name in SWIFT_OUTAGE:
                self.server.restart(name)
        else:
            self.server.start()
