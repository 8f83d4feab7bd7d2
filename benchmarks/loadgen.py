"""Load generator for any Zaqar v2 server: upstream Zaqar or zaqar-delay.

One asyncio process, one request at a time per connection, so it can share a small machine
with the servers it measures; every report includes the generator's own CPU use. Each
scenario prints one JSON document and a human line:

``produce``        single-message POSTs for ``--seconds``
``produce-batch``  POSTs of ``--batch`` (20) messages
``consume``        claim ``limit=10``, then DELETE each message with its claim id (as zaqar-bench)
``mixed``          half the connections produce, half consume
``lateness``       delayed queue, per-message delays of 1-10 s, consumers claiming
                   (waiting claims with ``--wait``, else polling every ``--poll`` s): lateness
                   p50/p99/max, messages delivered early, messages never delivered
``backlog``        claim latency with ``--sizes`` outstanding delayed messages in the queue,
                   the ratio between sizes, and Redis memory per outstanding message (past
                   the server's ``max_messages_per_project``, 1,000,000, posts are refused)
``waiting``        ``--waiters`` concurrent waiting claims, a ping while they wait, then as many
                   messages: how many claims got exactly one

    python -m benchmarks.loadgen produce --url http://127.0.0.1:8888 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks.aio import TRANSPORT_ERRORS, Connection, epoch_ms, zaqar_headers

Report = dict[str, Any]
# Benchmarks run as modules from the repository's root (python -m benchmarks.NAME).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS: dict[str, Callable[[argparse.Namespace], Awaitable[Report]]] = {}


def scenario(name: str) -> Callable[[Callable[..., Awaitable[Report]]], Any]:
    def register(function: Callable[..., Awaitable[Report]]) -> Any:
        SCENARIOS[name] = function
        return function

    return register


def now_ms() -> float:
    return time.time() * 1000


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def latency_summary(values: list[float]) -> dict[str, float | None]:
    return {
        "p50": percentile(values, 0.50),
        "p99": percentile(values, 0.99),
        "max": round(max(values), 2) if values else None,
    }


class Tally:
    """Requests, statuses and latencies (ms) of one kind of request."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.statuses: dict[int, int] = {}
        self.failures = 0

    def add(self, status: int, started: float) -> None:
        self.latencies.append((time.perf_counter() - started) * 1000)
        self.statuses[status] = self.statuses.get(status, 0) + 1

    @property
    def errors(self) -> int:
        return self.failures + sum(n for s, n in self.statuses.items() if s >= 400)

    def summary(self, seconds: float) -> Report:
        return {
            "requests": len(self.latencies),
            "requests_per_s": round(len(self.latencies) / seconds, 1),
            "errors": self.errors,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "latency_ms": latency_summary(self.latencies),
        }


def new_queue(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:10]}"


def connect(args: argparse.Namespace) -> Connection:
    return Connection(args.url, zaqar_headers(args.project))


async def create_queue(args: argparse.Namespace, queue: str, metadata: dict[str, Any]) -> None:
    connection = connect(args)
    try:
        response = await connection.request("PUT", f"/v2/queues/{queue}", metadata)
        assert response.status in (201, 204), response.body
    finally:
        connection.close()


async def fill(
    args: argparse.Namespace, queues: list[str], per_queue: int, message: dict[str, Any]
) -> float:
    """Post ``per_queue`` copies of ``message`` into each queue, 100 per POST, 4 connections
    at a time; returns the messages/s of the fill."""

    async def fill_one(queue: str, count: int) -> None:
        connection = connect(args)
        try:
            while count > 0:
                batch = min(100, count)
                document = {"messages": [message] * batch}
                response = await connection.request(
                    "POST", f"/v2/queues/{queue}/messages", document
                )
                assert response.status == 201, response.body
                count -= batch
        finally:
            connection.close()

    parallel = 4
    part = -(-per_queue // parallel)
    shares = [
        (queue, min(part, per_queue - i * part))
        for queue in queues
        for i in range(parallel)
        if per_queue > i * part
    ]
    started = time.perf_counter()
    await asyncio.gather(*(fill_one(q, n) for q, n in shares))
    return round(len(queues) * per_queue / (time.perf_counter() - started), 1)


async def run_for(seconds: float, workers: list[Callable[[float], Awaitable[None]]]) -> float:
    """Run every worker until the deadline; returns the elapsed seconds."""
    started = time.perf_counter()
    deadline = started + seconds
    await asyncio.gather(*(worker(deadline) for worker in workers))
    return time.perf_counter() - started


def producer(
    args: argparse.Namespace, queue: str, batch: int, tally: Tally
) -> Callable[[float], Awaitable[None]]:
    document = {
        "messages": [{"body": {"event": "bench", "n": i}, "ttl": 3600} for i in range(batch)]
    }
    path = f"/v2/queues/{queue}/messages"

    async def work(deadline: float) -> None:
        connection = connect(args)
        try:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                try:
                    response = await connection.request("POST", path, document)
                except TRANSPORT_ERRORS:
                    tally.failures += 1
                    connection.close()
                    continue
                tally.add(response.status, started)
        finally:
            connection.close()

    return work


def consumer(
    args: argparse.Namespace,
    queue: str,
    claims: Tally,
    deletes: Tally,
    last_delete: list[float] | None = None,
) -> Callable[[float], Awaitable[None]]:
    """Claim and delete until the deadline; ``last_delete[0]`` is set to the perf_counter of
    each delete that succeeds (so a run that empties its queues knows when it did)."""
    path = f"/v2/queues/{queue}/claims?limit=10"

    async def work(deadline: float) -> None:
        connection = connect(args)
        try:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                try:
                    response = await connection.request("POST", path, {"ttl": 60, "grace": 60})
                    claims.add(response.status, started)
                    if response.status != 201:
                        continue
                    for message in response.json()["messages"]:
                        started = time.perf_counter()
                        deleted = await connection.request("DELETE", message["href"])
                        deletes.add(deleted.status, started)
                        if last_delete is not None and deleted.status == 204:
                            last_delete[0] = time.perf_counter()
                except TRANSPORT_ERRORS:
                    claims.failures += 1
                    connection.close()
        finally:
            connection.close()

    return work


def queues_for(args: argparse.Namespace, kind: str) -> list[str]:
    return [new_queue(kind) for _ in range(args.queues)]


@scenario("produce")
async def produce(args: argparse.Namespace) -> Report:
    return await _produce(args, 1)


@scenario("produce-batch")
async def produce_batch(args: argparse.Namespace) -> Report:
    return await _produce(args, args.batch)


async def _produce(args: argparse.Namespace, batch: int) -> Report:
    queues = queues_for(args, "produce")
    tally = Tally()
    workers = [
        producer(args, queues[i % len(queues)], batch, tally) for i in range(args.connections)
    ]
    elapsed = await run_for(args.seconds, workers)
    posted = tally.statuses.get(201, 0) * batch
    return {
        "messages_per_s": round(posted / elapsed, 1),
        "batch": batch,
        "posts": tally.summary(elapsed),
    }


@scenario("consume")
async def consume(args: argparse.Namespace) -> Report:
    queues = queues_for(args, "consume")
    fill_rate = await fill(
        args, queues, args.prefill // len(queues), {"body": {"n": 1}, "ttl": 3600}
    )
    claims, deletes = Tally(), Tally()
    last_delete = [0.0]
    workers = [
        consumer(args, queues[i % len(queues)], claims, deletes, last_delete)
        for i in range(args.connections)
    ]
    started = time.perf_counter()
    elapsed = await run_for(args.seconds, workers)
    deleted = deletes.statuses.get(204, 0)
    # A server that empties the queues before the end is rated over the time it took, not
    # over the idle rest of the run (which would cap it at prefill / seconds).
    drained = deleted >= args.prefill
    busy_s = (last_delete[0] - started) if drained else elapsed
    return {
        "messages_per_s": round(deleted / busy_s, 1),
        "drained_after_s": round(busy_s, 2) if drained else None,
        "prefill": args.prefill,
        "prefill_messages_per_s": fill_rate,
        "empty_claims": claims.statuses.get(204, 0),
        "claims": claims.summary(elapsed),
        "deletes": deletes.summary(elapsed),
    }


@scenario("mixed")
async def mixed(args: argparse.Namespace) -> Report:
    queues = queues_for(args, "mixed")
    await fill(args, queues, 100, {"body": {"n": 1}, "ttl": 3600})
    posts, claims, deletes = Tally(), Tally(), Tally()
    half = max(1, args.connections // 2)
    workers = [producer(args, queues[i % len(queues)], 1, posts) for i in range(half)]
    workers += [consumer(args, queues[i % len(queues)], claims, deletes) for i in range(half)]
    elapsed = await run_for(args.seconds, workers)
    return {
        "produced_per_s": round(posts.statuses.get(201, 0) / elapsed, 1),
        "consumed_per_s": round(deletes.statuses.get(204, 0) / elapsed, 1),
        "messages_per_s": round(
            (posts.statuses.get(201, 0) + deletes.statuses.get(204, 0)) / elapsed, 1
        ),
        "posts": posts.summary(elapsed),
        "claims": claims.summary(elapsed),
        "deletes": deletes.summary(elapsed),
    }


@scenario("lateness")
async def lateness(args: argparse.Namespace) -> Report:
    """Lateness is the claim answer's arrival minus the due time. The due time is the server's
    own when it reports one (zaqar-delay's ``with_schedule=true``); otherwise it is estimated
    as (POST sent) + delay, never later than the server's, so the lateness is an upper bound
    (too high by up to the POST's latency). Either way, a message counts as early only when
    its claim answer arrived before (POST sent) + delay: certainly early."""
    queue = new_queue("lateness")
    await create_queue(args, queue, {"_default_message_delay": 1})
    if args.backlog:  # outstanding messages due long after the run, in the same queue
        await fill(args, [queue], args.backlog, {"body": {"n": -1}, "ttl": 3600, "delay": 900})
    due: dict[int, float] = {}  # client estimate: POST sent + delay
    server_due: dict[int, float] = {}
    seen: dict[int, float] = {}
    rng = random.Random(7)
    finished = asyncio.Event()

    async def produce_all() -> None:
        connection = connect(args)
        try:
            for start in range(0, args.messages, 20):
                count = min(20, args.messages - start)
                delays = [rng.randint(1, args.max_delay) for _ in range(count)]
                document = {
                    "messages": [
                        {"body": {"n": start + i}, "ttl": 3600, "delay": d}
                        for i, d in enumerate(delays)
                    ]
                }
                sent = now_ms()
                response = await connection.request(
                    "POST", f"/v2/queues/{queue}/messages", document
                )
                assert response.status == 201, response.body
                for i, d in enumerate(delays):
                    due[start + i] = sent + d * 1000
                await asyncio.sleep(args.spread / (args.messages / 20))
        finally:
            connection.close()

    wait = f"&wait={int(args.wait)}" if args.wait else ""
    path = f"/v2/queues/{queue}/claims?limit=10&with_schedule=true{wait}"

    async def consume_all() -> None:
        connection = connect(args)
        try:
            while not finished.is_set():
                response = await connection.request("POST", path, {"ttl": 600, "grace": 60})
                arrived = now_ms()
                if response.status == 201:
                    for message in response.json()["messages"]:
                        seen.setdefault(message["body"]["n"], arrived)
                        if "due" in message:  # servers that do not know the option omit it
                            server_due[message["body"]["n"]] = epoch_ms(message["due"])
                elif not args.wait:
                    await asyncio.sleep(args.poll)
        finally:
            connection.close()

    async def stop_when_done() -> None:
        await producing
        last_due = max(due.values())
        while len(seen) < args.messages and now_ms() < last_due + args.grace * 1000:
            await asyncio.sleep(0.1)
        finished.set()

    producing = asyncio.ensure_future(produce_all())
    consumers = [asyncio.ensure_future(consume_all()) for _ in range(args.connections)]
    await stop_when_done()
    await asyncio.wait(consumers, timeout=(args.wait or args.poll) + 5)
    for task in consumers:
        task.cancel()
    exact = len(server_due) == len(seen)
    lates = [seen[n] - (server_due[n] if exact else due[n]) for n in seen]
    return {
        "messages": args.messages,
        "backlog": args.backlog,
        "consumers": args.connections,
        "mode": f"wait={int(args.wait)}" if args.wait else f"poll={args.poll}",
        "delivered": len(seen),
        "due_from": "server" if exact else "client estimate (upper bound of lateness)",
        "early": sum(1 for n in seen if seen[n] < due[n]),
        "never_delivered": args.messages - len(seen),
        "lateness_ms": {
            **latency_summary(lates),
            "mean": round(statistics.fmean(lates), 2) if lates else None,
        },
    }


async def redis_used_memory(url: str | None) -> int | None:
    if not url:
        return None
    import redis

    return int(redis.Redis.from_url(url).info("memory")["used_memory"])


@scenario("backlog")
async def backlog(args: argparse.Namespace) -> Report:
    """For each size, a delayed queue holding that many messages due in 15 minutes; then
    ``--samples`` times: post one message due now, time the claim that takes it, delete it."""
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        queue = new_queue("backlog")
        await create_queue(args, queue, {"_default_message_delay": 900})
        before = await redis_used_memory(args.redis_url)
        fill_rate = await fill(args, [queue], size, {"body": {"n": 0}, "ttl": 3600, "delay": 900})
        after = await redis_used_memory(args.redis_url)
        connection = connect(args)
        claim_ms: list[float] = []
        missed = 0
        try:
            for n in range(args.samples):
                document = {"messages": [{"body": {"n": n}, "ttl": 3600, "delay": 0}]}
                response = await connection.request(
                    "POST", f"/v2/queues/{queue}/messages", document
                )
                assert response.status == 201, response.body
                started = time.perf_counter()
                response = await connection.request(
                    "POST", f"/v2/queues/{queue}/claims?limit=1", {"ttl": 60, "grace": 60}
                )
                claim_ms.append((time.perf_counter() - started) * 1000)
                if response.status != 201 or response.json()["messages"][0]["body"]["n"] != n:
                    missed += 1
                    continue
                await connection.request("DELETE", response.json()["messages"][0]["href"])
        finally:
            connection.close()
        per_message = None if before is None or after is None else round((after - before) / size, 1)
        results.append(
            {
                "outstanding": size,
                "fill_messages_per_s": fill_rate,
                "claim_ms": {
                    **latency_summary(claim_ms),
                    "mean": round(statistics.fmean(claim_ms), 3),
                },
                "claims_missing_the_due_message": missed,
                "redis_bytes_per_message": per_message,
            }
        )
        if args.drop_after:
            await connect(args).request("DELETE", f"/v2/queues/{queue}")
    first, last = results[0]["claim_ms"]["p50"], results[-1]["claim_ms"]["p50"]
    return {
        "sizes": results,
        "claim_p50_ratio_largest_to_smallest": round(last / first, 2) if first else None,
    }


@scenario("waiting")
async def waiting(args: argparse.Namespace) -> Report:
    queue = new_queue("waiting")
    await create_queue(args, queue, {})
    path = f"/v2/queues/{queue}/claims?limit=1&wait=20"

    async def wait_one() -> int:
        connection = connect(args)
        try:
            response = await connection.request("POST", path, {"ttl": 60, "grace": 60}, timeout=60)
            if response.status == 201:
                return len(response.json()["messages"])
            if response.status == 204:
                return 0
            raise RuntimeError(f"waiting claim answered {response.status}: {response.body!r}")
        finally:
            connection.close()

    claims = [asyncio.ensure_future(wait_one()) for _ in range(args.waiters)]
    await asyncio.sleep(2)
    ping = connect(args)
    started = time.perf_counter()
    response = await ping.request("GET", "/v2/ping")
    ping_ms = round((time.perf_counter() - started) * 1000, 2)
    ping.close()
    await fill(args, [queue], args.waiters, {"body": {"n": 1}, "ttl": 3600})
    got = await asyncio.gather(*claims, return_exceptions=True)
    return {
        "waiters": args.waiters,
        "served_exactly_one": sum(1 for g in got if g == 1),
        "errors": sum(1 for g in got if isinstance(g, BaseException)),
        "ping_status": response.status,
        "ping_ms_while_waiting": ping_ms,
    }


def run_in_child(
    scenario: str, url: str, label: str, extra: list[str], timeout: float = 7200
) -> Report:
    """Run this script for one scenario in a child process (its CPU is then its own, apart
    from the caller's); print the run's human line and return its report."""
    command = [sys.executable, "-m", "benchmarks.loadgen", scenario, "--url", url]
    command += ["--label", label, *extra]
    run = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if run.returncode != 0:
        raise SystemExit(f"loadgen {scenario} on {label} failed:\n{run.stderr}")
    document, human = run.stdout.strip().splitlines()[-2:]
    print(human, flush=True)
    report: Report = json.loads(document)
    return report


def human_line(name: str, report: Report) -> str:
    cpu = f"client CPU {report['client_cpu_percent']}%"
    if name in ("produce", "produce-batch", "consume"):
        return f"{name}: {report['messages_per_s']} messages/s ({cpu})"
    if name == "mixed":
        return (
            f"mixed: produced {report['produced_per_s']}/s, consumed {report['consumed_per_s']}/s"
            f" ({cpu})"
        )
    if name == "lateness":
        late = report["lateness_ms"]
        return (
            f"lateness ({report['mode']}): p50 {late['p50']} ms, p99 {late['p99']} ms, max "
            f"{late['max']} ms, early {report['early']}, never delivered "
            f"{report['never_delivered']} ({cpu})"
        )
    if name == "backlog":
        sizes = ", ".join(
            f"{s['outstanding']}: claim p50 {s['claim_ms']['p50']} ms" for s in report["sizes"]
        )
        return f"backlog: {sizes}; ratio {report['claim_p50_ratio_largest_to_smallest']} ({cpu})"
    return (
        f"waiting: {report['served_exactly_one']}/{report['waiters']} served, ping "
        f"{report['ping_ms_while_waiting']} ms ({cpu})"
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("scenario", choices=sorted(SCENARIOS))
    p.add_argument("--url", default="http://127.0.0.1:8888")
    p.add_argument("--label", default="", help="added to the JSON document (server name)")
    p.add_argument("--project", default="bench")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--queues", type=int, default=4)
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--prefill", type=int, default=50_000, help="consume: messages posted first")
    p.add_argument("--messages", type=int, default=2000, help="lateness: messages measured")
    p.add_argument("--spread", type=float, default=2.0, help="lateness: seconds of posting")
    p.add_argument("--backlog", type=int, default=0, help="lateness: messages due later")
    p.add_argument("--max-delay", type=int, default=10, help="lateness: delays 1..N s")
    p.add_argument("--wait", type=float, default=0.0, help="lateness: waiting claims of N s")
    p.add_argument("--poll", type=float, default=0.1, help="lateness: polling interval, s")
    p.add_argument("--grace", type=float, default=15.0, help="lateness: wait past the last due")
    p.add_argument("--sizes", default="10000,1000000,10000000", help="backlog: queue sizes")
    p.add_argument("--samples", type=int, default=200, help="backlog: claims timed per size")
    p.add_argument("--redis-url", default=None, help="backlog: the server's Redis, for memory")
    p.add_argument("--drop-after", action="store_true", help="backlog: delete each queue after")
    p.add_argument("--waiters", type=int, default=1000)
    return p


async def run(args: argparse.Namespace) -> Report:
    cpu, wall = time.process_time(), time.perf_counter()
    report = await SCENARIOS[args.scenario](args)
    elapsed = time.perf_counter() - wall
    report["client_cpu_percent"] = round(100 * (time.process_time() - cpu) / elapsed, 1)
    return {"scenario": args.scenario, "label": args.label, "url": args.url, **report}


def main(argv: list[str] | None = None) -> Report:
    args = parser().parse_args(argv)
    report = asyncio.run(run(args))
    print(json.dumps(report))
    print(
        ("" if not args.label else f"[{args.label}] ") + human_line(args.scenario, report),
        flush=True,
    )
    return report


if __name__ == "__main__":
    main()
