"""Recurring schedules: many schedules firing every second (or ``--every`` seconds), each slot
once, and how late.

Starts a zaqar-delay-server (``--workers`` workers, the embedded store, or ``--store`` a
storage URI), writes ``--schedules`` schedules (``every: 1``, or ``--every``) spread over
``--queues`` queues, and lets them fire for ``--seconds``. One consumer per queue claims with
``wait`` and ``with_schedule=true`` and deletes what it claimed; each fired message's
``due`` is its slot. Then the schedules are deleted and the queues drained.

Printed (one JSON document, also written to ``--results``): the fires received, the slots
fired twice (the same schedule and slot in two messages: must be 0), the slots missing in
each schedule's run of consecutive slots (must be 0 unless ``skip`` skipped them), fires
claimed before they were due (``fired_before_slot``: must be 0), and lateness (claimed minus
slot, ms) p50/p99/max over the fires whose slot came after the schedules were written (the
first period is excluded: it is the write's, not the schedule's). An on-time fire is due
exactly at its slot; a fire posted after its slot passed (the push of its tick came more
than the lead late) is due when it was posted: it counts in ``late_fires``, its lateness is
from its slot, and slots it skipped (``misfire`` ``skip``) count in ``slots_missing``.
``fires_beyond_slots`` and ``fires_short_of_slots`` compare each schedule's fires with the
slots between its write and its delete. A message claimed again (its delete lost in a fault)
is one fire, counted in ``claimed_again``. ``server_cpu_s`` is the CPU the server's processes
(workers, embedded store) used while the schedules fired, consumers' claims and deletes
included, and ``server_cpu_ms_per_fire`` that per fire (with ``--kill``, the killed process's
share is lost).

With ``--neighbour``, another project writes one schedule of its own (same period) on a
queue of its own, with its own consumer, beside the ``--schedules`` of the first: its fires
are reported apart (``neighbour``: fires, slots missing or twice, fired before the slot,
lateness), which is what the first project's load costs another project's schedule (run with
``--schedules 0 --neighbour`` for the same schedule alone).

With ``--kill worker`` or ``--kill store``, one worker or the embedded store is killed with
SIGKILL halfway (``kill`` in the answer: what, its pid, whether it was gone after, when);
gunicorn starts another worker, the server's supervisor another store. ``--misfire`` is the
schedules' (``skip`` by default; with ``all`` no slot may be missing).

    python -m benchmarks.schedules --schedules 1000 --seconds 120
    python -m benchmarks.schedules --schedules 1000 --seconds 120 --misfire all --kill worker
    python -m benchmarks.schedules --schedules 1000 --seconds 60 --neighbour
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import itertools
import json
import os
import signal
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import requests

from benchmarks import recorded
from benchmarks.loadgen import latency_summary
from benchmarks.procstat import cpu_seconds
from benchmarks.swift import RESULTS
from testbed.processes import ServiceProcess, is_gone, wait_until
from zaqar_delay.conf import STORAGE_URI_ENV
from zaqar_delay.schedules.firing import LEAD_MS

CLIENT_ID = "3381af92-2b9e-11e3-b191-71861300734c"


def epoch_ms(text: str) -> int:
    return int(datetime.datetime.fromisoformat(text).timestamp() * 1000)


class Consumer(threading.Thread):
    """Claims (long-polling) from one queue until told to stop and the queue is empty; records
    (schedule, message id, due ms, claimed at ms) for each message."""

    def __init__(self, url: str, headers: dict[str, str], queue: str) -> None:
        super().__init__(daemon=True)
        self.url, self.queue = url, queue
        self.session = requests.Session()
        self.session.headers.update(headers)
        self.fires: list[tuple[str, str, int, float]] = []
        self.stopping = threading.Event()
        self.errors = 0

    def run(self) -> None:
        while True:
            try:
                answer = self.session.post(
                    f"{self.url}/v2/queues/{self.queue}/claims",
                    params={"limit": 20, "wait": 1, "with_schedule": "true"},
                    json={"ttl": 60, "grace": 60},
                    timeout=30,
                )
            except requests.RequestException:
                self.errors += 1
                time.sleep(0.2)
                continue
            claimed_at = time.time() * 1000
            if answer.status_code == 204:
                if self.stopping.is_set():
                    return
                continue
            if answer.status_code != 201:
                self.errors += 1
                time.sleep(0.2)
                continue
            messages = answer.json()["messages"]
            for message in messages:
                schedule = message["body"]["schedule"]
                self.fires.append((schedule, message["id"], epoch_ms(message["due"]), claimed_at))
            claim_id = messages[0]["href"].rsplit("claim_id=", 1)[1]
            ids = ",".join(m["id"] for m in messages)
            try:
                self.session.delete(
                    f"{self.url}/v2/queues/{self.queue}/messages",
                    params={"ids": ids, "claim_ids": claim_id},
                    timeout=30,
                )
            except requests.RequestException:
                # Its worker was killed: the claim ends and the messages come back.
                self.errors += 1


def run(args: argparse.Namespace) -> dict[str, Any]:
    env = {STORAGE_URI_ENV: args.store} if args.store else {}
    conf = Path(tempfile.mkdtemp(prefix="zd-schedules-")) / "zaqar-delay.conf"
    conf.write_text(f"[notification]\npush_concurrency = {args.push_concurrency}\n")
    service = ServiceProcess(env=env, workers=args.workers, args=["--config-file", str(conf)])
    service.start().wait_for_workers()
    project = f"bench-{uuid.uuid4().hex[:8]}"
    headers = {"Client-ID": CLIENT_ID, "X-Project-ID": project}
    http = requests.Session()
    http.headers.update(headers)
    queues = [f"q{i}" for i in range(args.queues)]
    consumers = [Consumer(service.url, headers, queue) for queue in queues]
    lifetimes: dict[str, list[float]] = {}
    neighbour = Neighbour(service.url, args) if args.neighbour else None
    try:
        for consumer in consumers:
            consumer.start()
        if neighbour is not None:
            neighbour.write()
        names = []
        for index in range(args.schedules):
            queue, name = queues[index % len(queues)], f"s{index}"
            document = {
                "every": args.every,
                "misfire": args.misfire,
                "message": {"body": {"schedule": name}, "ttl": 300},
            }
            sent_ms = time.time() * 1000
            answer = http.put(f"{service.url}/v2/queues/{queue}/schedules/{name}", json=document)
            assert answer.status_code == 201, answer.text
            names.append((queue, name))
            lifetimes[name] = [sent_ms, 0.0]
        written_ms = time.time() * 1000
        cpu_before = cpu_seconds([service.process.pid])
        time.sleep(args.seconds / 2)
        killed = kill(service, args.kill)
        time.sleep(args.seconds / 2)
        cpu_s = cpu_seconds([service.process.pid]) - cpu_before
        for queue, name in names:
            http.delete(f"{service.url}/v2/queues/{queue}/schedules/{name}")
            lifetimes[name][1] = time.time() * 1000
        if neighbour is not None:
            neighbour.delete()
        stopped_ms = time.time() * 1000
        everyone = consumers + ([neighbour.consumer] if neighbour is not None else [])
        for consumer in everyone:
            consumer.stopping.set()
        for consumer in everyone:
            consumer.join(timeout=60)
    finally:
        service.stop()
    reported = report(consumers, written_ms, stopped_ms, lifetimes, args)
    if neighbour is not None:
        reported["neighbour"] = neighbour.report(written_ms, stopped_ms, args)
    fires = max(1, reported["fires"])
    # The server's CPU while the schedules fired (its workers, the embedded store, the
    # consumers' claims and deletes): the per-fire cost of the whole path.
    cpu = {
        "server_cpu_s": round(cpu_s, 2),
        "server_cpu_ms_per_fire": round(1000 * cpu_s / fires, 3),
    }
    return {**reported, **cpu, "kill": killed}


class Neighbour:
    """Another project's one schedule (``args.every``) on a queue of its own, with its own
    consumer: what the benchmark's load costs a schedule of another project."""

    NAME = "neighbour"

    def __init__(self, url: str, args: argparse.Namespace) -> None:
        self.url = url
        headers = {"Client-ID": CLIENT_ID, "X-Project-ID": f"other-{uuid.uuid4().hex[:8]}"}
        self.http = requests.Session()
        self.http.headers.update(headers)
        self.path = f"{url}/v2/queues/mine/schedules/{self.NAME}"
        self.document = {
            "every": args.every,
            "misfire": args.misfire,
            "message": {"body": {"schedule": self.NAME}, "ttl": 300},
        }
        self.consumer = Consumer(url, headers, "mine")
        self.lifetime = [0.0, 0.0]

    def write(self) -> None:
        self.consumer.start()
        self.lifetime[0] = time.time() * 1000
        answer = self.http.put(self.path, json=self.document)
        assert answer.status_code == 201, answer.text

    def delete(self) -> None:
        self.http.delete(self.path)
        self.lifetime[1] = time.time() * 1000

    def report(self, written_ms: float, stopped_ms: float, args: argparse.Namespace) -> Any:
        """Its fires, as :func:`report` counts them, over the same window."""
        counted = report([self.consumer], written_ms, stopped_ms, {self.NAME: self.lifetime}, args)
        kept = (
            "fires",
            "slots_fired_twice",
            "slots_missing",
            "late_fires",
            "fired_before_slot",
            "lateness_ms",
            "consumer_errors",
        )
        return {key: counted[key] for key in kept}


def kill(service: ServiceProcess, what: str) -> dict[str, Any] | None:
    """SIGKILL a worker or the embedded store (nothing for "none"); what, its pid, when, and
    whether it was gone after."""
    if what == "none":
        return None
    pid = service.worker_pids()[0] if what == "worker" else service.store_pid()
    os.kill(pid, signal.SIGKILL)
    killed_ms = time.time() * 1000
    with contextlib.suppress(RuntimeError):  # reported: gone is False
        wait_until(lambda: is_gone(pid), 10, f"the killed {what}")
    return {"what": what, "pid": pid, "gone": is_gone(pid), "at_ms": killed_ms}


def report(
    consumers: list[Consumer],
    written_ms: float,
    stopped_ms: float,
    lifetimes: dict[str, list[float]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    # On-time fires are due exactly at their slot, on the schedule's grid of whole periods
    # from its anchor (the grid's phase is the most common due time modulo the period); a late
    # fire (its slot passed before the fire posted it) is due when it was posted. The k late
    # fires of one schedule posted together (misfire "all" catching up) are the k slots up
    # to the grid point before that; one alone is that grid point.
    received: dict[str, list[tuple[int, float]]] = collections.defaultdict(list)
    seen: set[str] = set()
    claimed_again = 0
    for consumer in consumers:
        for schedule, message_id, due, claimed_at in consumer.fires:
            if message_id in seen:
                claimed_again += 1
                continue
            seen.add(message_id)
            received[schedule].append((due, claimed_at))
    by_schedule: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    on_time: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    lateness, early, late_fires = [], 0, 0
    period = args.every * 1000
    for schedule, fires_of in received.items():
        phase = collections.Counter(due % period for due, _ in fires_of).most_common(1)[0][0]
        posted_together: collections.Counter[int] = collections.Counter()
        for due, claimed_at in sorted(fires_of):
            grid = due - (due - phase) % period
            slot = grid - period * posted_together[due]
            if due != grid:
                late_fires += 1
                posted_together[due] += 1
            by_schedule[schedule][slot] += 1
            if due == slot:
                on_time[schedule][slot] += 1
            if claimed_at < due:
                early += 1
            if slot > written_ms + period:
                lateness.append(claimed_at - slot)
    # Twice: two messages due at the very same slot (a late fire's slot is inferred, so only
    # on-time fires are compared; the dedup ids must have made this impossible).
    twice = sum(
        count - 1 for counted in on_time.values() for count in counted.values() if count > 1
    )
    missing = 0
    for slots in by_schedule.values():
        ordered = sorted(slots)
        missing += sum((b - a) // period - 1 for a, b in itertools.pairwise(ordered))
    fires = len(seen)
    # A schedule written at w and deleted at d fires at least (d - w) // period - 1 slots and
    # at most (d - w) // period + 1, plus those whose messages were posted ahead (LEAD_MS)
    # before the delete: fires beyond them are extra, short of them lacking.
    extra = lacking = 0
    ahead = -(-LEAD_MS // period)
    for name, (put_ms, deleted_ms) in lifetimes.items():
        periods = int(deleted_ms - put_ms) // period
        got = sum(by_schedule[name].values())
        extra += max(0, got - (periods + 1 + ahead))
        lacking += max(0, periods - 1 - got)
    return {
        "schedules": args.schedules,
        "queues": args.queues,
        "workers": args.workers,
        "seconds": args.seconds,
        "every": args.every,
        "store": args.store or "embedded",
        "push_concurrency": args.push_concurrency,
        "misfire": args.misfire,
        "fires": fires,
        "fires_per_s": round(fires / max(1.0, (stopped_ms - written_ms) / 1000), 1),
        "schedules_fired": len(by_schedule),
        "slots_fired_twice": twice,
        "slots_missing": missing,
        "late_fires": late_fires,
        "fires_beyond_slots": extra,
        "fires_short_of_slots": lacking,
        "fired_before_slot": early,
        "lateness_ms": latency_summary(lateness),
        "consumer_errors": sum(c.errors for c in consumers),
        "claimed_again": claimed_again,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--every", type=int, default=1, help="the schedules' period, s")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--store", default="", help="a storage URI (default: embedded)")
    parser.add_argument(
        "--push-concurrency", type=int, default=32, help="[notification] push_concurrency"
    )
    parser.add_argument("--misfire", choices=("skip", "all"), default="skip")
    parser.add_argument(
        "--kill", choices=("none", "worker", "store"), default="none", help="SIGKILL halfway"
    )
    parser.add_argument(
        "--neighbour",
        action="store_true",
        help="another project's one schedule beside them, reported apart",
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args()
    result = run(args)
    print(json.dumps(result))
    recorded.write(args.results, "schedules", result)


if __name__ == "__main__":
    main()
