"""Soak: steady mixed delayed traffic for ``--minutes``, memory of every process over time.

Starts a redis-server and a zaqar-delay-server (``--workers`` workers) on loopback ports, then
posts ``--rate`` messages per second (one per POST, due 0 to ``--max-delay`` seconds later)
while ``--consumers`` waiting-claim loops take and delete them. Every ``--sample`` seconds it
records the resident memory of the server's master, each worker and Redis, plus the counts of
posts, deliveries and errors. At the end: the memory series, its growth from the first minute
to the last, error counts, lateness (claim answer minus the server's due time) and messages
delivered twice (no claim expires during a soak, so there must be none), the CPU of client,
server and Redis (each, and all three per message posted) and each one's context switches per
message. Memory of a healthy service stays flat once warmed up. With ``--busy F`` another
process takes a share F of one core for the whole run (busy for F of every 10 ms): the same
machine, less quiet.

Before and after the soak, unless ``--no-reference``, a hello-world falcon app under gunicorn's
gevent workers is loaded for ``--reference-seconds`` (benchmarks.compare's ceiling): the
requests per second this machine answers from Python at all, at that time. The same commit's
soak varies with it, so each result carries both.

    python -m benchmarks.soak --minutes 10 --rate 500
    python -m benchmarks.soak --minutes 2 --rate 2500 --busy 0.3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from benchmarks.aio import TRANSPORT_ERRORS, Connection, epoch_ms, zaqar_headers
from benchmarks.compare import hello_world_falcon
from benchmarks.loadgen import latency_summary
from benchmarks.procstat import context_switches, cpu_seconds, rss_bytes, tree
from testbed.processes import RedisServer, ServiceProcess
from zaqar_delay.conf import STORAGE_URI_ENV


class Counters:
    def __init__(self) -> None:
        self.posted = 0
        self.delivered = 0
        self.errors: dict[str, int] = {}
        self.lateness_ms: list[float] = []
        self.early = 0
        self.sequence = 0  # numbers the posted messages
        self.seen: set[int] = set()
        self.duplicates = 0  # a message delivered twice (no claim expires in a soak)

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


async def produce(url: str, queue: str, rate: float, args: Any, c: Counters, end: float) -> None:
    connection = Connection(url, zaqar_headers())
    rng = random.Random()
    interval = 1.0 / rate
    next_at = time.monotonic()
    try:
        while time.monotonic() < end:
            due = int(time.time() * 1000) + rng.randrange(0, args.max_delay * 1000)
            c.sequence += 1
            body = {"due": due, "n": c.sequence}
            document = {"messages": [{"body": body, "ttl": 600, "deliver_at": due}]}
            try:
                response = await connection.request(
                    "POST", f"/v2/queues/{queue}/messages", document
                )
                if response.status == 201:
                    c.posted += 1
                else:
                    c.error(f"post {response.status}")
            except TRANSPORT_ERRORS as exc:
                c.error(f"post {type(exc).__name__}")
                connection.close()
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    finally:
        connection.close()


async def consume(url: str, queue: str, c: Counters, end: float) -> None:
    connection = Connection(url, zaqar_headers())
    path = f"/v2/queues/{queue}/claims?limit=10&wait=5&with_schedule=true"
    try:
        while time.monotonic() < end:
            try:
                response = await connection.request("POST", path, {"ttl": 60, "grace": 60})
                arrived = time.time() * 1000
                if response.status == 204:
                    continue
                if response.status != 201:
                    c.error(f"claim {response.status}")
                    continue
                for message in response.json()["messages"]:
                    due = epoch_ms(message["due"])
                    c.lateness_ms.append(arrived - due)
                    c.early += arrived < due
                    c.duplicates += message["body"]["n"] in c.seen
                    c.seen.add(message["body"]["n"])
                    deleted = await connection.request("DELETE", message["href"])
                    if deleted.status == 204:
                        c.delivered += 1
                    else:
                        c.error(f"delete {deleted.status}")
            except TRANSPORT_ERRORS as exc:
                c.error(f"claim {type(exc).__name__}")
                connection.close()
    finally:
        connection.close()


BUSY_PERIOD_S = 0.01


def spin(share: float) -> None:
    """Keep a core busy for ``share`` of every period, forever (a process of its own)."""
    while True:
        started = time.perf_counter()
        while time.perf_counter() - started < share * BUSY_PERIOD_S:
            pass
        time.sleep((1 - share) * BUSY_PERIOD_S)


@contextmanager
def other_load(share: float) -> Iterator[int | None]:
    """A process taking ``share`` of one core while the block runs (none for 0): its pid."""
    if share <= 0:
        yield None
        return
    process = multiprocessing.Process(target=spin, args=(share,), daemon=True)
    process.start()
    try:
        yield process.pid
    finally:
        process.terminate()
        process.join(5)


def memory(service: ServiceProcess, redis: RedisServer) -> dict[str, int]:
    assert service.process is not None and redis.process is not None
    master = service.process.pid
    found = {"master": rss_bytes(master), "redis": rss_bytes(redis.process.pid)}
    for i, pid in enumerate(p for p in tree(master) if p != master):
        found[f"worker{i + 1}"] = rss_bytes(pid)
    return found


async def soak(
    args: argparse.Namespace, service: ServiceProcess, redis: RedisServer
) -> dict[str, Any]:
    counters = Counters()
    queues = [f"soak-{i}" for i in range(args.queues)]
    assert service.process is not None and redis.process is not None
    server_pids, redis_pids = [service.process.pid], [redis.process.pid]
    server_cpu, redis_cpu = cpu_seconds(server_pids), cpu_seconds(redis_pids)
    switches_before = switches(server_pids, redis_pids)
    started, cpu_started = time.monotonic(), time.process_time()
    end = started + args.minutes * 60
    per_producer = args.rate / args.producers
    tasks = [
        asyncio.ensure_future(
            produce(service.url, queues[i % len(queues)], per_producer, args, counters, end)
        )
        for i in range(args.producers)
    ]
    tasks += [
        asyncio.ensure_future(consume(service.url, queues[i % len(queues)], counters, end + 10))
        for i in range(args.consumers)
    ]
    samples = []
    while time.monotonic() < end:
        await asyncio.sleep(args.sample)
        sample = {
            "t_s": round(time.monotonic() - started),
            "rss_mib": {k: round(v / 2**20, 1) for k, v in memory(service, redis).items()},
            "posted": counters.posted,
            "delivered": counters.delivered,
            "errors": sum(counters.errors.values()),
        }
        samples.append(sample)
        print(json.dumps(sample), flush=True)
    await asyncio.gather(*tasks)
    first = [s for s in samples if s["t_s"] <= 60] or samples[:1]
    last = [s for s in samples if s["t_s"] >= samples[-1]["t_s"] - 60]

    def mean_rss(group: list[dict[str, Any]], name: str) -> float:
        return round(sum(s["rss_mib"].get(name, 0) for s in group) / len(group), 1)

    growth = {
        name: {"first_minute_mib": mean_rss(first, name), "last_minute_mib": mean_rss(last, name)}
        for name in samples[-1]["rss_mib"]
    }
    elapsed = time.monotonic() - started
    cpu_used = {
        "client": time.process_time() - cpu_started,
        "server": cpu_seconds(server_pids) - server_cpu,
        "redis": cpu_seconds(redis_pids) - redis_cpu,
    }
    switches_after = switches(server_pids, redis_pids)
    client_cpu, server_cpu, redis_cpu = (100 * used / elapsed for used in cpu_used.values())
    posted = max(counters.posted, 1)
    return {
        "client_cpu_percent": round(client_cpu, 1),
        "server_cpu_percent": round(server_cpu, 1),
        "redis_cpu_percent": round(redis_cpu, 1),
        # What the machine charges per message, all three processes together: the same code
        # costs more CPU per message on a busier host and at lower load (more sleeps and
        # wake-ups per message), so this is what to compare between runs.
        "cpu_ms_per_message": round(1000 * sum(cpu_used.values()) / posted, 3),
        "context_switches_per_message": {
            name: round((switches_after[name] - switches_before[name]) / posted, 2)
            for name in switches_after
        },
        "minutes": args.minutes,
        "rate": args.rate,
        "busy": args.busy,
        "posted": counters.posted,
        "delivered": counters.delivered,
        "errors": counters.errors,
        "early": counters.early,
        "duplicates": counters.duplicates,
        "lateness_ms": latency_summary(counters.lateness_ms),
        "memory": growth,
        "samples": samples,
    }


def switches(server_pids: list[int], redis_pids: list[int]) -> dict[str, int]:
    """Context switches so far of the client (this process's threads only: the server and
    Redis are its children), the server's processes and Redis."""
    return {
        "client": context_switches([os.getpid()], descendants=False),
        "server": context_switches(server_pids),
        "redis": context_switches(redis_pids),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--rate", type=float, default=500, help="messages posted per second")
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--consumers", type=int, default=8)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--max-delay", type=int, default=5)
    parser.add_argument("--sample", type=float, default=10, help="seconds between samples")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--busy", type=float, default=0.0, help="share of one core another process takes"
    )
    parser.add_argument("--no-reference", action="store_true", help="skip the hello-world run")
    parser.add_argument("--reference-seconds", type=float, default=5.0)
    args = parser.parse_args()
    if not 0 <= args.busy < 1:
        parser.error("--busy is a share of one core, from 0 up to (not including) 1")
    references = [machine_reference(args)]
    redis = RedisServer().start()
    service = ServiceProcess(env={STORAGE_URI_ENV: redis.url}, workers=args.workers)
    service.start().wait_for_workers()
    try:
        with other_load(args.busy) as busy_pid:
            cpu_before = cpu_seconds([busy_pid]) if busy_pid else 0.0
            started = time.monotonic()
            report = asyncio.run(soak(args, service, redis))
            if busy_pid:
                used = cpu_seconds([busy_pid]) - cpu_before
                report["busy_cpu_percent"] = round(100 * used / (time.monotonic() - started), 1)
    finally:
        service.stop()
        redis.stop()
    references.append(machine_reference(args))
    if not args.no_reference:
        report["hello_world_falcon_requests_per_s"] = {
            "before": references[0],
            "after": references[1],
        }
    print(json.dumps(report))
    growth = ", ".join(
        f"{name} {m['first_minute_mib']}->{m['last_minute_mib']} MiB"
        for name, m in report["memory"].items()
    )
    late = report["lateness_ms"]
    print(
        f"soak {args.minutes} min at {args.rate}/s: posted {report['posted']}, delivered "
        f"{report['delivered']}, errors {sum(report['errors'].values())}, early {report['early']}, "
        f"duplicates {report['duplicates']}, "
        f"lateness p50 {late['p50']} p99 {late['p99']} max {late['max']} ms; memory {growth}; "
        f"CPU: client {report['client_cpu_percent']}%, server {report['server_cpu_percent']}%, "
        f"Redis {report['redis_cpu_percent']}%, {report['cpu_ms_per_message']} ms per message; "
        f"context switches per message {report['context_switches_per_message']}"
        + (f", other process {report['busy_cpu_percent']}%" if "busy_cpu_percent" in report else "")
        + (
            f"; hello-world falcon {references[0]:,} then {references[1]:,} requests/s"
            if not args.no_reference
            else ""
        )
    )


def machine_reference(args: argparse.Namespace) -> float | None:
    """Requests per second of a hello-world falcon app now (None with ``--no-reference``)."""
    if args.no_reference:
        return None
    rate: float = hello_world_falcon(args.workers, args.reference_seconds)["messages_per_s"]
    print(f"machine reference: hello-world falcon {rate:,} requests/s", flush=True)
    return rate


if __name__ == "__main__":
    main()
