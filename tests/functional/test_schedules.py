"""Recurring schedules through the real server (gunicorn, two workers), with faults mid-run:

- every server process and the embedded store killed with SIGKILL, then started again on the
  same data;
- one worker killed with SIGKILL (gunicorn starts another);
- the Sentinel group's primary killed with SIGKILL (the Sentinels promote a replica; the server
  writes with ``replica_acks = 1``).

Half the schedules have ``misfire: skip``, half ``misfire: all``, all from one ``start_at``
the test chooses. The fires are the messages the consumers claimed and those left in the
queues at the end (a claim whose answer the fault cut off). Afterwards no slot fired twice,
no message was seen before its slot, each schedule went on after the fault, an ``all``
schedule fired every one of its slots (those missed during the fault caught up), and a
``skip`` schedule fired the missed ones at most once.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
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
START_AFTER_S = 3  # the first slot: past the writes, on a loaded host too
PUSH_TIMEOUT_S = 2  # a tick's lease lasts three of them: a dead worker's ticks return soon


def epoch_ms(text: str) -> int:
    return int(datetime.datetime.fromisoformat(text).timestamp() * 1000)


@dataclasses.dataclass(frozen=True)
class Fired:
    """A message a schedule posted: its schedule, id, due time and when a consumer claimed it
    (ms; None for one left in its queue at the end)."""

    schedule: str
    message_id: str
    due: int
    claimed_at: float | None


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
    project from one ``start_at``, and one consumer per queue."""

    def __init__(self) -> None:
        project = f"p-{uuid.uuid4().hex[:8]}"
        self.headers = {"Client-ID": CLIENT_ID, "X-Project-ID": project}
        self.consumers = [Consumer(self.headers, queue) for queue in ("a", "b")]
        self.first_slot = 0
        self.misfire: dict[str, str] = {}
        self.leftovers: list[Fired] = []

    def start(self, url: str) -> None:
        """Write the schedules, their first slot ``START_AFTER_S`` seconds ahead (on a whole
        second), and start the consumers.

        The first slot is the test's own ``start_at``, not read back from ``GET``: a tick fires
        ``LEAD_MS`` ahead of its slot, so by the time a slow ``GET`` answers, a schedule
        counted from its write may have fired its first slots, and ``next`` starts later."""
        self.follow(url)
        for consumer in self.consumers:
            consumer.start()
        self.first_slot = (int(time.time()) + START_AFTER_S) * 1000
        start_at = datetime.datetime.fromtimestamp(self.first_slot / 1000, datetime.UTC)
        for n in range(SCHEDULES):
            name, queue = f"s{n}", "ab"[n % 2]
            misfire = "all" if n % 4 >= 2 else "skip"
            document = {
                "every": 1,
                "start_at": start_at.isoformat(),
                "misfire": misfire,
                "message": {"body": {"schedule": name}},
            }
            path = f"{url}/v2/queues/{queue}/schedules/{name}"
            answer = requests.put(path, json=document, headers=self.headers, timeout=10)
            assert answer.status_code == 201, answer.text
            self.misfire[name] = misfire
        # A schedule written after its start_at would begin at its next slot after the write.
        assert time.time() * 1000 < self.first_slot, "the schedules were written too late"

    def wait_for_slots(self, count: int) -> None:
        """Until half a second after the ``count``-th slot (the first one at ``first_slot``):
        the fault comes between slots, as it did when the run's start was not on a slot."""
        time.sleep(max(0.0, self.first_slot / 1000 + count - 0.5 - time.time()))

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

    def take_leftovers(self, url: str) -> None:
        """Stop the consumers and record the due messages left in the queues, claimed or not.

        A fire is a message posted, whether or not a consumer saw it: a claim whose answer a
        fault cut off leaves its messages claimed, out of sight for the claim's ttl (60 s,
        longer than a run)."""
        self.stop()
        for queue in ("a", "b"):
            params = {"include_claimed": "true", "echo": "true", "with_schedule": "true"}
            while True:
                answer = requests.get(
                    f"{url}/v2/queues/{queue}/messages",
                    params={**params, "limit": 20},
                    headers=self.headers,
                    timeout=10,
                )
                assert answer.status_code in (200, 204), answer.text
                messages = answer.json()["messages"] if answer.status_code == 200 else []
                for message in messages:
                    due = epoch_ms(message["due"])
                    schedule = message["body"]["schedule"]
                    self.leftovers.append(Fired(schedule, message["id"], due, None))
                if len(messages) < 20:
                    break
                params["marker"] = messages[-1]["id"]

    def claimed(self) -> list[Fired]:
        """What the consumers claimed."""
        return [fired for consumer in self.consumers for fired in consumer.fires]

    def fires(self) -> list[Fired]:
        """What the consumers claimed, then what was left in the queues."""
        return self.claimed() + self.leftovers

    def check(self, fault_ms: float, ended_ms: float) -> None:
        """Each slot once, none early, each schedule on after ``fault_ms``; every slot of an
        ``all`` schedule fired; the missed slots of a ``skip`` one at most once."""
        by_schedule: dict[str, dict[str, Fired]] = collections.defaultdict(dict)
        claimed = self.claimed()
        for fired in claimed + self.leftovers:
            # A message claimed again (a delete the failover lost) is one fire.
            by_schedule[fired.schedule].setdefault(fired.message_id, fired)
        assert all(f.claimed_at is not None and f.claimed_at >= f.due for f in claimed)
        assert sorted(by_schedule) == sorted(self.misfire)
        for name, fires in by_schedule.items():
            first = self.first_slot
            # An on-time message is due at its slot (the grid from the first slot); a late
            # one (posted after its slot) is due when it was posted.
            on_time = sorted(f.due for f in fires.values() if (f.due - first) % 1000 == 0)
            every = sorted((f.due - first, f.message_id[-6:]) for f in fires.values())
            # The messages of an ``all`` catch-up share the time they were posted, which may
            # fall on a whole second: ``all`` is held to its exact count below instead.
            if self.misfire[name] == "skip":
                assert len(on_time) == len(set(on_time)), f"{name}: {every}"
            assert on_time and on_time[-1] > ended_ms - 5000, (name, on_time)
            assert any(due > fault_ms for due in on_time), (name, on_time)
            last = on_time[-1]
            # Late messages are posted before the next on-time one: those due by the last
            # on-time slot are the fires of the slots up to it.
            fired = sum(f.due <= last for f in fires.values())
            slots = (last - first) // 1000 + 1
            if self.misfire[name] == "all":
                dues = sorted(f.due - first for f in fires.values())
                assert fired == slots, (name, fired, slots, dues)
            else:
                assert fired <= slots, (name, fired, slots)
                # One message per catch-up, never a burst of the missed slots: each second of
                # the grid holds at most one message. (A catch-up posted just before a slot
                # and the fire of that slot a few ms after it are two seconds, not a burst: a
                # dead worker's lease can end a slot's worth before the slot.)
                seconds = collections.Counter((f.due - first) // 1000 for f in fires.values())
                dues = sorted(f.due - first for f in fires.values())
                assert max(seconds.values()) == 1, f"{name}: {dues}"


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
        run.wait_for_slots(3)
        killed = service.kill()
        killed_at = time.time() * 1000
        assert killed and all(is_gone(pid) for pid in killed)
        time.sleep(3)
        restarted_at = time.time() * 1000  # nothing can fire before this: no server runs
        service = ServiceProcess(data_dir=service.data_dir).start().wait_for_workers()
        run.follow(service.url)
        run.wait_for_fires_after(restarted_at, 3)
        ended_at = time.time() * 1000
        run.take_leftovers(service.url)
    finally:
        run.stop()
        service.stop()
    run.check(killed_at, ended_at)
    # Nothing was due while no server ran (but the messages posted ahead of their slots).
    during = [f for f in run.fires() if killed_at + 2000 < f.due < restarted_at]
    assert during == [], during


def test_kill_9_of_a_worker_mid_run_fires_each_slot_once() -> None:
    run = Run()
    service = ServiceProcess(args=["--config-file", config_file("")]).start().wait_for_workers()
    try:
        run.start(service.url)
        run.wait_for_slots(3)
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
        run.take_leftovers(service.url)
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
        run.wait_for_slots(3)
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
        run.take_leftovers(service.url)
    finally:
        run.stop()
        service.stop()
    run.check(killed_at, ended_at)
