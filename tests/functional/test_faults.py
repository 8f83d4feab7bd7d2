"""Faults under load: the store going away and coming back, the server killed and restarted,
on a redis-server with the append-only file, on MongoDB's wire protocol with journaled
writes (secantusdb on WiredTiger, log fsynced at commit), and on a Swift all-in-one (its proxy
and object server are what go away).

Clients see 503 JSON errors (never a 500, never a hang) while the store is away, or connection
errors while the server is away; the service recovers by itself; no message whose POST was
answered 201 is lost and no post is half-written.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
import requests

from tests.processes import RedisServer, SecantusServer, ServiceProcess, wait_until
from tests.swift_aio import SwiftAllInOne, missing_binaries
from zaqar_delay.conf import STORAGE_URI_ENV

pytestmark = [pytest.mark.functional, pytest.mark.faults]

HEADERS = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c", "X-Project-ID": "faults"}
BATCH = 5
# A request must be answered within this many seconds even while the store is gone.
ANSWER_BOUND_S = 12


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
            except requests.ConnectionError:
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


def stored_ids(url: str, queue: str, ids: list[str]) -> set[str]:
    found: set[str] = set()
    for start in range(0, len(ids), 20):
        chunk = ",".join(ids[start : start + 20])
        response = requests.get(
            f"{url}/v2/queues/{queue}/messages?ids={chunk}", headers=HEADERS, timeout=30
        )
        assert response.status_code == 200, response.text
        found |= {m["id"] for m in response.json()["messages"]}
    return found


def total(url: str, queue: str) -> int:
    response = requests.get(f"{url}/v2/queues/{queue}/stats", headers=HEADERS, timeout=30)
    assert response.status_code == 200, response.text
    return int(response.json()["messages"]["total"])


# The Swift servers an outage kills: the object server, which holds the data, and the proxy,
# the entry point. They start again in that order (SwiftAllInOne.restart says why).
SWIFT_OUTAGE = ("object", "proxy")


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


@pytest.fixture(params=["redis-aof", "mongodb", "swift"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    if request.param == "swift":
        if missing_binaries():
            pytest.skip(f"Swift's servers are needed ({', '.join(missing_binaries())})")
        swift = SwiftAllInOne().start()
        yield Store(swift, swift.store_uri)
        swift.stop()
        return
    if request.param == "redis-aof":
        # always: with everysec Redis may answer writes it has not written yet while a slow
        # fsync runs (doc/source/manual/durability.rst), which this test is not about.
        redis = RedisServer(aof=True, extra_args=["--appendfsync", "always"]).start()
        yield Store(redis, redis.url)
        redis.stop()
        return
    path = tempfile.mkdtemp(prefix="zd-secantus-")
    mongo = SecantusServer(storage_path=path, durable=True).start()
    yield Store(mongo, mongo.database_url("zaqar_delay_faults"))
    mongo.stop()


def test_store_outage_answers_503_then_recovers(store: Store) -> None:
    service = ServiceProcess(env={STORAGE_URI_ENV: store.uri}).start()
    load = Load(base_url=lambda: service.url, queue="outage")
    try:
        threads = load.run()
        time.sleep(1.5)
        store.kill()  # the process dies; what it acknowledged is in its log
        # Longer than the storage timeout (5 s): MongoDB's driver waits that long for a
        # server before a request fails, and retries writes once one is back.
        time.sleep(8)
        with load.lock:
            outage_statuses = len(load.statuses)
        store.start()
        wait_until(
            lambda: load.statuses[-1] == 201 and len(load.statuses) > outage_statuses,
            30,
            "recovery after the store came back",
        )
        time.sleep(1)
        load.stop.set()
        for thread in threads:
            thread.join(30)
        assert 503 in load.statuses, "the outage was never seen"
        assert set(load.statuses) <= {201, 503}, load.bad_errors
        assert load.bad_errors == []
        assert load.slowest_s < ANSWER_BOUND_S
        assert stored_ids(service.url, "outage", load.acked) == set(load.acked)
        # All or nothing: every stored post is whole (a post cut off by the outage may have
        # been written without its answer, but never in part).
        assert total(service.url, "outage") % BATCH == 0
    finally:
        load.stop.set()
        service.stop()


def test_server_killed_under_load_loses_nothing(store: Store) -> None:
    first = ServiceProcess(env={STORAGE_URI_ENV: store.uri}).start()
    current = {"service": first}
    load = Load(base_url=lambda: current["service"].url, queue="restart")
    second: ServiceProcess | None = None
    try:
        threads = load.run()
        time.sleep(1.5)
        assert first.kill(), "the server was not killed"
        second = ServiceProcess(env={STORAGE_URI_ENV: store.uri}).start()
        current["service"] = second
        acked_before = len(load.acked)
        wait_until(lambda: len(load.acked) > acked_before + 50, 30, "posts to the new server")
        load.stop.set()
        for thread in threads:
            thread.join(30)
        assert load.bad_errors == []
        assert set(load.statuses) == {201}
        assert load.connection_errors > 0, "the kill was never seen"
        assert stored_ids(second.url, "restart", load.acked) == set(load.acked)
        stored = total(second.url, "restart")
        assert stored % BATCH == 0
        # Posts in flight when the server died may be stored without an answer: at most one
        # per client thread.
        assert len(load.acked) <= stored <= len(load.acked) + 3 * BATCH
    finally:
        load.stop.set()
        if second is not None:
            second.stop()
        first.stop()
