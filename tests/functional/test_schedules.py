"""Recurring schedules through the real server (gunicorn, two workers, the embedded store):
with every server process and the store killed with SIGKILL mid-run and started again on the
same data, no slot fires twice, none before its time, and each schedule goes on after the
restart, its missed slots fired as ``misfire`` says."""

from __future__ import annotations

import collections
import datetime
import threading
import time
import uuid

import pytest
import requests

from testbed.processes import ServiceProcess, is_gone

pytestmark = pytest.mark.functional

CLIENT_ID = "3381af92-2b9e-11e3-b191-71861300734c"
SCHEDULES = 8


def epoch_ms(text: str) -> int:
    return int(datetime.datetime.fromisoformat(text).timestamp() * 1000)


class Consumer(threading.Thread):
    """Claims from one queue until stopped; records (schedule, due ms, claimed at ms)."""

    def __init__(self, headers: dict[str, str], queue: str) -> None:
        super().__init__(daemon=True)
        self.url = ""
        self.queue = queue
        self.session = requests.Session()
        self.session.headers.update(headers)
        self.fires: list[tuple[str, int, float]] = []
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
            self.fires.append((message["body"]["schedule"], epoch_ms(message["due"]), claimed_at))
        claim_id = messages[0]["href"].rsplit("claim_id=", 1)[1]
        ids = ",".join(m["id"] for m in messages)
        self.session.delete(
            f"{self.url}/v2/queues/{self.queue}/messages",
            params={"ids": ids, "claim_ids": claim_id},
            timeout=10,
        )


def test_kill_9_of_the_server_and_its_store_mid_run_fires_no_slot_twice() -> None:
    project = f"p-{uuid.uuid4().hex[:8]}"
    headers = {"Client-ID": CLIENT_ID, "X-Project-ID": project}
    service = ServiceProcess().start().wait_for_workers()
    consumers = [Consumer(headers, queue) for queue in ("a", "b")]
    try:
        for consumer in consumers:
            consumer.url = service.url
            consumer.start()
        for n in range(SCHEDULES):
            queue = "ab"[n % 2]
            document = {"every": 1, "message": {"body": {"schedule": f"s{n}"}, "ttl": 300}}
            answer = requests.put(
                f"{service.url}/v2/queues/{queue}/schedules/s{n}",
                json=document,
                headers=headers,
                timeout=10,
            )
            assert answer.status_code == 201, answer.text
        time.sleep(4)
        killed = service.kill()
        killed_at = time.time() * 1000
        assert killed and all(is_gone(pid) for pid in killed)
        time.sleep(3)
        restarted_at = time.time() * 1000  # nothing can fire before this: no server runs
        service = ServiceProcess(data_dir=service.data_dir).start().wait_for_workers()
        for consumer in consumers:
            consumer.url = service.url

        def fired_after_restart() -> collections.Counter[str]:
            return collections.Counter(
                schedule
                for consumer in consumers
                for schedule, due, _ in list(consumer.fires)
                if due >= restarted_at
            )

        # Three fires of each schedule after the restart (a loaded machine may take a while).
        deadline = time.monotonic() + 60
        while min(fired_after_restart().get(f"s{n}", 0) for n in range(SCHEDULES)) < 3:
            assert time.monotonic() < deadline, fired_after_restart()
            time.sleep(0.2)
        ended_at = time.time() * 1000
    finally:
        for consumer in consumers:
            consumer.stopping.set()
        for consumer in consumers:
            consumer.join(timeout=15)
        service.stop()
    by_schedule: dict[str, list[tuple[int, float]]] = collections.defaultdict(list)
    for consumer in consumers:
        for schedule, due, claimed_at in consumer.fires:
            by_schedule[schedule].append((due, claimed_at))
    assert sorted(by_schedule) == sorted(f"s{n}" for n in range(SCHEDULES))
    for schedule, fires in by_schedule.items():
        dues = [due for due, _ in fires]
        # No message twice: the dues of one schedule's messages all differ, and none was
        # claimed before it was due.
        assert len(dues) == len(set(dues)), (schedule, sorted(dues))
        assert all(claimed_at >= due for due, claimed_at in fires), schedule
        # misfire "skip": the slots missed while no server ran made at most one message,
        # posted after the restart; and the plan went on after it.
        during = [due for due in dues if killed_at + 2000 < due < restarted_at]
        assert during == [], (schedule, during)
        after = sorted(due for due in dues if due >= restarted_at)
        assert len(after) >= 3, (schedule, after)
        # Once caught up, one fire a second: no burst of the missed slots.
        first_second = [due for due in after if due < after[0] + 1000]
        assert len(first_second) <= 2, (schedule, after)
        assert after[-1] > ended_at - 5000, (schedule, after)
