"""Many concurrent waiting claims: are they all held, served exactly once, and does the server
keep answering other requests meanwhile?

Opens ``--waiters`` claims with ``?wait=20&limit=1`` at once, measures a ping while they wait,
then posts as many messages. Prints one JSON document and a human line.

    python benchmarks/waiting.py [--waiters 1000] [--workers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.aio import post_messages, request, zaqar_headers
from tests.processes import ServiceProcess


async def run(port: int, waiters: int) -> dict[str, object]:
    queue = f"waiting-{uuid.uuid4().hex[:8]}"
    path = f"/v2/queues/{queue}/claims?wait=20&limit=1"

    async def wait_for_one() -> tuple[int, list[str]]:
        try:
            response = await request("127.0.0.1", port, "POST", path, zaqar_headers(), timeout=60)
        except (TimeoutError, OSError) as exc:
            failures.append(type(exc).__name__)
            return -1, []
        if response.status not in (201, 204):
            failures.append(f"{response.status}: {response.body[:200]!r}")
        ids = [m["id"] for m in response.json()["messages"]] if response.status == 201 else []
        return response.status, ids

    failures: list[str] = []
    tasks = [asyncio.create_task(wait_for_one()) for _ in range(waiters)]
    await asyncio.sleep(3)  # every claim is now waiting
    started = time.perf_counter()
    ping = await request("127.0.0.1", port, "GET", "/v2/ping", zaqar_headers())
    ping_ms = (time.perf_counter() - started) * 1000
    posted = await post_messages(port, queue, [{"body": i} for i in range(waiters)])
    served_started = time.perf_counter()
    results = await asyncio.gather(*tasks)
    claimed = [i for _, ids in results for i in ids]
    return {
        "waiters": waiters,
        "served_one_message": sum(1 for status, ids in results if status == 201 and len(ids) == 1),
        "answered_204": sum(1 for status, _ in results if status == 204),
        "errors": sum(1 for status, _ in results if status not in (201, 204)),
        "duplicates": len(claimed) - len(set(claimed)),
        "unclaimed_posted": len(set(posted) - set(claimed)),
        "ping_while_waiting_ms": round(ping_ms, 1),
        "ping_status": ping.status,
        "seconds_to_serve_all": round(time.perf_counter() - served_started, 2),
        "failure_kinds": sorted(set(failures))[:5],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiters", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * args.waiters + 256)), hard))
    service = ServiceProcess(workers=args.workers).start()
    try:
        report = asyncio.run(run(service.port, args.waiters))
    finally:
        service.stop()
    print(json.dumps(report))
    print(
        f"{report['served_one_message']}/{args.waiters} waiting claims served one message each "
        f"({report['errors']} errors, {report['duplicates']} duplicates, "
        f"{report['answered_204']} answered 204); ping while waiting "
        f"{report['ping_while_waiting_ms']} ms; {args.workers} gevent workers",
        flush=True,
    )


if __name__ == "__main__":
    main()
