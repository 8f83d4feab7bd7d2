"""Recurring schedules through the real server (gunicorn, two workers), with faults mid-run:

- every server process and the embedded store killed with SIGKILL, then started again on the
  same data;
- one worker killed with SIGKILL (gunicorn starts another);
- the Sentinel group's primary killed with SIGKILL (the Sentinels promote a replica; the server
  writes with ``replica_acks = 1``).

Half the schedules have ``misfire: skip``, half ``misfire: all``. Afterwards no slot fired
twice, no message was seen before its slot, each schedule went on after the fault, an ``all``
schedule fired every one of its slots (those missed during the fault caught up), and a
``skip`` schedule fired the missed ones at most once.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import itertools
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import requests

from testbed.processes import RedisSentinelGroup, ServiceProcess, is_gone
from tests.helpers.failover import STORE_CONFIG
from zaqar_delay.conf import STORAGE_URI_ENV

pytestmark = pytest.mark.functional

CLIENT_ID = "3381af92-2b9e-11e3-b191-71861300734c"
SCHEDULES = 8
PUSH_TIMEOUT_S = 2  # a tick's lease lasts three of them: a dead worker's ticks return soon


def epoch_ms(text: str) -> int:
    return int(datetime.datetime.fromisoformat(text).timestamp() * 1000)


@dataclasses.dataclass(frozen=True)
class Fired:
    """A message a consumer got: its schedule, id, due time and when it was claimed (ms)."""

    schedule: str
    message_id: str
    due: int
    claimed_at: float


class Consumer(threading.Thread):
    """Claims from one queue until stopped, recording each message it gets."""

    def __init__(self, headers: dict[str, str], queue: str) -> None:
        super().__init__(daemon=True)
        self.url = ""
        self.queue = queue
        self.session = requests.Session()
        self.session.headers.update(headers)
        self.fires: list[Fired] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self._claim_once()
            except requests.RequestException:
                time.sleep(0.1)  # the server is down: its claims come back when it does

    def _claim_once(self) -> None:
        answer = self.session.post(
            f"{self.url}/v2/queues/{self.queue}/claims",
            params={"limit": 20, "wait": 1, "with_schedule": "true"},
            json={"ttl": 60, "grace": 60},
            timeout=10,
        )
        claimed_at = time.time() * 1000
        if answer.status_code != 201:
            return
        messages = answer.json()["messages"]
        for message in messages:
            schedule = message["body"]["schedule"]
            self.fires.append(Fired(schedule, message["id"], epoch_ms(message["due"]), claimed_at))
        claim_id = messages[0]["href"].rsplit("claim_id=", 1)[1]
        ids = ",".join(m["id"] for m in messages)
        self.session.delete(
            f"{self.url}/v2/queues/{self.queue}/messages",
            params={"ids": ids, "claim_ids": claim_id},
            timeout=10,
        )


class Run:
    """Schedules ``s0`` .. ``s7`` firing every second over queues ``a`` and ``b`` of a fresh
    project, and one consumer per queue."""

    def __init__(self) -> None:
        project = f"p-{uuid.uuid4().hex[:8]}"
        self.headers = {"Client-ID": CLIENT_ID, "X-Project-ID": project}
        self.consumers = [Consumer(self.headers, queue) for queue in ("a", "b")]
        self.first_slot: dict[str, int] = {}
        self.misfire: dict[str, str] = {}

    def start(self, url: str) -> None:
        self.follow(url)
        for consumer in self.consumers:
            consumer.start()
        for n in range(SCHEDULES):
            name, queue = f"s{n}", "ab"[n % 2]
            misfire = "all" if n % 4 >= 2 else "skip"
            document = {"every": 1, "misfire": misfire, "message": {"body": {"schedule": name}}}
            path = f"{url}/v2/queues/{queue}/schedules/{name}"
            answer = requests.put(path, json=document, headers=self.headers, timeout=10)
            assert answer.status_code == 201, answer.text
            shown = requests.get(path, headers=self.headers, timeout=10).json()
            self.first_slot[name], self.misfire[name] = epoch_ms(shown["next"][0]), misfire

    def follow(self, url: str) -> None:
        for consumer in self.consumers:
            consumer.url = url

    def fires_due_after(self, since_ms: float) -> collections.Counter[str]:
        return collections.Counter(
            fired.schedule
            for consumer in self.consumers
            for fired in list(consumer.fires)
            if fired.due >= since_ms
        )

    def wait_for_fires_after(self, since_ms: float, count: int, timeout_s: float = 60) -> None:
        """Until each schedule has ``count`` messages due after ``since_ms``."""
        deadline = time.monotonic() + timeout_s
        while min(self.fires_due_after(since_ms).get(f"s{n}", 0) for n in range(SCHEDULES)) < count:
            assert time.monotonic() < deadline, self.fires_due_after(since_ms)
            time.sleep(0.2)

    def stop(self) -> None:
        for consumer in self.consumers:
            consumer.stopping.set()
        for consumer in self.consumers:
            consumer.join(timeout=15)

    def check(self, fault_ms: float, ended_ms: float) -> None:
        """Each slot once, none early, each schedule on after ``fault_ms``; every slot of an
        ``all`` schedule fired; the missed slots of a ``skip`` one at most once."""
        by_schedule: dict[str, dict[str, Fired]] = collections.defaultdict(dict)
        for consumer in self.consumers:
            for fired in consumer.fires:
                # A message claimed again (a delete the failover lost) is one fire.
                by_schedule[fired.schedule].setdefault(fired.message_id, fired)
        assert sorted(by_schedule) == sorted(self.first_slot)
        for name, fires in by_schedule.items():
            first = self.first_slot[name]
            assert all(f.claimed_at >= f.due for f in fires.values()), name
            # An on-time message is due at its slot (the grid from the first slot); a late
            # one (posted after its slot) is due when it was posted.
            on_time = sorted(f.due for f in fires.values() if (f.due - first) % 1000 == 0)
            assert len(on_time) == len(set(on_time)), (name, on_time)
            assert on_time and on_time[-1] > ended_ms - 5000, (name, on_time)
            assert any(due > fault_ms for due in on_time), (name, on_time)
            last = on_time[-1]
            # Late messages are posted before the next on-time one: those due by the last
            # on-time slot are the fires of the slots up to it.
            fired = sum(f.due <= last for f in fires.values())
            slots = (last - first) // 1000 + 1
            if self.misfire[name] == "all":
                assert fired == slots, (name, fired, slots)
            else:
                assert fired <= slots, (name, fired, slots)
                late = sorted(f.due for f in fires.values() if (f.due - first) % 1000)
                # One late message per catch-up, never a burst of the missed slots.
                assert all(b - a >= 500 for a, b in itertools.pairwise(late)), late


def config_file(text: str) -> str:
    path = os.path.join(tempfile.mkdtemp(prefix="zd-schedules-"), "zaqar-delay.conf")
    with open(path, "w") as f:
        f.write(f"{text}[notification]\npush_timeout = {PUSH_TIMEOUT_S}\n")
    return path


def test_kill_9_of_the_server_and_its_store_mid_run_fires_no_slot_twice() -> None:
    run = Run()
    service = ServiceProcess().start().wait_for_workers()
    try:
        run.start(service.url)
        time.sleep(4)
        killed = service.kill()
        killed_at = time.time() * 1000
        assert killed and all(is_gone(pid) for pid in killed)
        time.sleep(3)
        restarted_at = time.time() * 1000  # nothing can fire before this: no server runs
        service = ServiceProcess(data_dir=service.data_dir).start().wait_for_workers()
        run.follow(service.url)
        run.wait_for_fires_after(restarted_at, 3)
        ended_at = time.time() * 1000
    finally:
        run.stop()
        service.stop()
    run.check(killed_at, ended_at)
    # Nothing was due while no server ran (but the messages posted ahead of their slots).
    for consumer in run.consumers:
        during = [f for f in consumer.fires if killed_at + 2000 < f.due < restarted_at]
        assert during == [], during


def test_kill_9_of_a_worker_mid_run_fires_each_slot_once() -> None:
    run = Run()
    service = ServiceProcess(args=["--config-file", config_file("")]).start().wait_for_workers()
    try:
        run.start(service.url)
        time.sleep(4)
        victim = service.worker_pids()[0]
        os.kill(victim, 9)
        killed_at = time.time() * 1000
        deadline = time.monotonic() + 10
        while not is_gone(victim):
            assert time.monotonic() < deadline, "the killed worker still runs"
            time.sleep(0.05)
        # Past the dead worker's leases (three push timeouts), three more fires each.
        run.wait_for_fires_after(killed_at + 3 * PUSH_TIMEOUT_S * 1000 + 1000, 3)
        ended_at = time.time() * 1000
        assert victim not in service.worker_pids()
    finally:
        run.stop()
        service.stop()
    run.check(killed_at, ended_at)


@pytest.fixture
def sentinels() -> Iterator[RedisSentinelGroup]:
    group = RedisSentinelGroup(replicas=2, sentinels=3, down_after_ms=1000).start()
    yield group
    group.stop()


@pytest.mark.faults
def test_kill_9_of_the_sentinel_primary_mid_run_fires_each_slot_once(
    sentinels: RedisSentinelGroup,
) -> None:
    run = Run()
    service = ServiceProcess(
        env={STORAGE_URI_ENV: sentinels.url()},
        args=["--config-file", config_file(STORE_CONFIG)],
    ).start()
    try:
        service.wait_for_workers()
        run.start(service.url)
        time.sleep(4)
        old_primary = sentinels.primary_port()
        node = sentinels.node(old_primary)
        assert node.process is not None
        pid = node.process.pid
        node.kill()
        killed_at = time.time() * 1000
        assert is_gone(pid), "the killed primary still runs"
        run.wait_for_fires_after(killed_at + 5000, 3, timeout_s=90)
        assert sentinels.primary_port() != old_primary, "the Sentinels did not fail over"
        ended_at = time.time() * 1000
    finally:
        run.stop()
        service.stop()
    run.check(killed_at, ended_at)
