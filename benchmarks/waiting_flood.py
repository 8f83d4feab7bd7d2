"""How long another project's request waits while one project floods a server with waiting
claims.

Per round: a zaqar-delay server (one worker, 1,000 connections, embedded store); one project
opens ``--flood`` claims that wait (``?wait=20``) on an empty queue, each on a connection of
its own; once they are in, another project lists its queues. The round reports the seconds
that listing took and how the flood's claims were answered (status codes; ``error`` for a
connection that failed or was still unanswered after 45 s). ``--baseline REV`` runs the server
of another revision (checked out as ``benchmarks.compare`` does). Prints one JSON document per
round and a summary; asserts nothing::

    python -m benchmarks.waiting_flood --rounds 3
    python -m benchmarks.waiting_flood --rounds 3 --baseline 8ab3544
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import resource
import statistics
import time
import uuid
from typing import Any

from benchmarks.compare import checkout
from testbed.processes import ServiceProcess

WAIT_S = 20
SETTLE_S = 4.0  # the flood's claims reach the server and fall asleep


async def _request(port: int, head: str, body: bytes = b"") -> str:
    """Send one request on a connection of its own; the status code answered."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head.encode() + body)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), WAIT_S + 25)
        return status_line.split()[1].decode()
    finally:
        writer.close()


async def waiting_claim(port: int) -> str:
    body = b"{}"
    head = (
        f"POST /v2/queues/empty/claims?wait={WAIT_S} HTTP/1.1\r\nHost: bench\r\n"
        f"Client-ID: {uuid.uuid4()}\r\nX-Project-ID: flood\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    try:
        return await _request(port, head, body)
    except (OSError, IndexError):  # TimeoutError is an OSError
        return "error"


async def other_project(port: int) -> tuple[str, float]:
    head = (
        f"GET /v2/queues HTTP/1.1\r\nHost: bench\r\nClient-ID: {uuid.uuid4()}\r\n"
        "X-Project-ID: bystander\r\n\r\n"
    )
    started = time.monotonic()
    status = await _request(port, head)
    return status, round(time.monotonic() - started, 3)


async def flood(port: int, count: int) -> dict[str, Any]:
    claims = [asyncio.create_task(waiting_claim(port)) for _ in range(count)]
    await asyncio.sleep(SETTLE_S)
    status, took_s = await other_project(port)
    ends = collections.Counter(await asyncio.gather(*claims))
    return {"other_project_s": took_s, "other_status": status, "flood": dict(ends)}


def one_round(count: int, tree: str | None) -> dict[str, Any]:
    server = ServiceProcess(workers=1, cwd=tree).start().wait_for_workers()
    try:
        return asyncio.run(flood(server.port, count))
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--flood", type=int, default=1100, help="waiting claims of one project")
    parser.add_argument("--baseline", help="a git revision whose server to flood instead")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, args.flood + 200)), hard))
    tree = str(checkout(args.baseline)) if args.baseline else None
    rounds = []
    for _ in range(args.rounds):
        rounds.append(one_round(args.flood, tree))
        print(json.dumps(rounds[-1]), flush=True)
    summary = {
        "server": f"zaqar-delay@{args.baseline}" if args.baseline else "zaqar-delay",
        "flood": args.flood,
        "median_other_project_s": statistics.median(r["other_project_s"] for r in rounds),
        "flood_answers": dict(
            sum((collections.Counter(r["flood"]) for r in rounds), collections.Counter())
        ),
    }
    print(
        f"{summary['server']}: another project's request took a median "
        f"{summary['median_other_project_s']} s; the flood was answered "
        f"{summary['flood_answers']}"
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
