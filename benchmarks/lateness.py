"""Lateness of delayed delivery: claim time minus due time, with waiting and polling claims.

Posts ``--measured`` messages whose due times are spread over ``--spread`` seconds, into a
queue that also holds ``--backlog`` outstanding delayed messages due much later, then consumes
them with ``--consumers`` concurrent claim loops: waiting claims (``?wait=20``) or plain claims
polled every ``--poll`` seconds. Lateness is measured on this machine's clock (the server's
clock too) when the claim answer arrives. Prints one JSON document and a human line per mode.

    python benchmarks/lateness.py [--backlog 100000] [--measured 2000] [--spread 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.aio import post_messages, request, zaqar_headers
from tests.processes import ServiceProcess


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def consume(
    port: int,
    queue: str,
    mode: str,
    poll: float,
    expected: int,
    deadline: float,
    seen: dict[str, float],
) -> None:
    headers = zaqar_headers()
    wait = "&wait=20" if mode == "waiting" else ""
    path = f"/v2/queues/{queue}/claims?limit=10&with_schedule=true{wait}"
    while len(seen) < expected and time.monotonic() < deadline:
        response = await request(
            "127.0.0.1", port, "POST", path, headers, {"ttl": 600, "grace": 60}
        )
        arrived = now_ms()
        if response.status == 201:
            for message in response.json()["messages"]:
                due = message["body"]["due"]
                seen.setdefault(message["id"], arrived - due)
        elif mode == "polling":
            await asyncio.sleep(poll)


async def run_mode(port: int, mode: str, args: argparse.Namespace) -> dict[str, object]:
    queue = f"{mode}-{uuid.uuid4().hex[:8]}"
    lead_ms = 3000 + args.measured  # time to post the measured messages before any is due
    backlog_due = now_ms() + 900_000  # the latest a message may be due: never within the run
    backlog = [{"body": {"due": backlog_due}, "ttl": 3600, "deliver_at": backlog_due}]
    await post_messages(port, queue, backlog * args.backlog)
    start = now_ms() + lead_ms
    dues = [start + int(i * args.spread * 1000 / args.measured) for i in range(args.measured)]
    seen: dict[str, float] = {}
    deadline = time.monotonic() + lead_ms / 1000 + args.spread + 30
    consumers = [
        consume(port, queue, mode, args.poll, args.measured, deadline, seen)
        for _ in range(args.consumers)
    ]
    measured = [{"body": {"due": d}, "ttl": 3600, "deliver_at": d} for d in dues]
    await post_messages(port, queue, measured)
    await asyncio.gather(*consumers)
    lateness = list(seen.values())
    return {
        "mode": mode,
        "backlog": args.backlog,
        "measured": args.measured,
        "delivered": len(lateness),
        "never_delivered": args.measured - len(lateness),
        "early": sum(1 for v in lateness if v < 0),
        "lateness_ms": {
            "p50": percentile(lateness, 0.50),
            "p99": percentile(lateness, 0.99),
            "max": max(lateness) if lateness else None,
            "mean": round(statistics.fmean(lateness), 2) if lateness else None,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--measured", type=int, default=2000)
    parser.add_argument("--spread", type=float, default=10.0, help="seconds over which dues spread")
    parser.add_argument("--consumers", type=int, default=20)
    parser.add_argument("--poll", type=float, default=1.0, help="polling interval, seconds")
    parser.add_argument("--modes", default="waiting,polling")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    service = ServiceProcess(workers=args.workers).start()
    try:
        for mode in args.modes.split(","):
            report = asyncio.run(run_mode(service.port, mode, args))
            print(json.dumps(report))
            late = report["lateness_ms"]
            print(
                f"{mode}: lateness p50 {late['p50']} ms, p99 {late['p99']} ms, "
                f"max {late['max']} ms; "
                f"early {report['early']}, never delivered {report['never_delivered']} "
                f"(backlog {args.backlog}, {args.consumers} consumers)",
                flush=True,
            )
    finally:
        service.stop()


if __name__ == "__main__":
    main()
