"""What one project's flood of large listings costs another project's posts.

Starts ``zaqar-delay-server`` (embedded store, ``--workers`` 2, ``[server]
max_active_requests = --active`` unless it is left out), posts the 14 MB listing of
``slow_readers`` (20 messages of 60,000 four-byte characters) to one project, then for
``--seconds``: ``--connections`` connections of that project ask for the listing again and
again, reading each answer whole, while another project posts one small message every
0.1 s. Printed as one JSON line: the other project's post times (p50, p99, max) and
statuses, the listings answered (by status) and the connections that failed, and the
server's warnings that a request found no free connection to the store.

    python -m benchmarks.noisy_neighbour [--connections 200] [--seconds 20] [--active N]
        [--results DIR]

Writes ``DIR/noisy-neighbour-<time>.json`` as well. Run it from an older checkout (its
``PYTHONPATH`` and working directory) to measure that revision's server.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import requests

from benchmarks import recorded
from benchmarks.slow_readers import LISTING, filled_server, headers
from benchmarks.swift import RESULTS
from testbed.processes import ServiceProcess

POST_EVERY_S = 0.1


class Flood:
    """Connections that ask for the listing and read each answer whole, until ``stop``."""

    def __init__(self, port: int, stop: float) -> None:
        self.port, self.stop = port, stop
        self.statuses: collections.Counter[int] = collections.Counter()
        self.failed = 0
        lines = [
            f"GET {LISTING} HTTP/1.1",
            "Host: q",
            *(f"{k}: {v}" for k, v in headers("hostile").items()),
        ]
        self.request = ("\r\n".join(lines) + "\r\n\r\n").encode()

    async def connection(self) -> None:
        while time.monotonic() < self.stop:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
                while time.monotonic() < self.stop:
                    writer.write(self.request)
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                    await reader.readexactly(length)
                    self.statuses[int(head.split()[1])] += 1
                writer.close()
            except (OSError, asyncio.IncompleteReadError):
                self.failed += 1  # closed by the server (a cut send): open another
                await asyncio.sleep(0.05)


def other_project_posts(url: str, stop: float, times: list[float], statuses: list[int]) -> None:
    session = requests.Session()
    while time.monotonic() < stop:
        started = time.perf_counter()
        posted = session.post(
            f"{url}/v2/queues/calm/messages",
            json={"messages": [{"ttl": 300, "body": "small"}]},
            headers=headers("calm"),
            timeout=60,
        )
        times.append(time.perf_counter() - started)
        statuses.append(posted.status_code)
        time.sleep(POST_EVERY_S)


async def flood_while_posting(
    service: ServiceProcess, connections: int, seconds: int
) -> dict[str, Any]:
    stop = time.monotonic() + seconds
    flood = Flood(service.port, stop)
    times: list[float] = []
    statuses: list[int] = []
    poster = threading.Thread(target=other_project_posts, args=(service.url, stop, times, statuses))
    poster.start()
    await asyncio.gather(*(flood.connection() for _ in range(connections)))
    poster.join()
    times.sort()
    return {
        "other_project_posts": {
            "count": len(times),
            "statuses": dict(collections.Counter(statuses)),
            "p50_s": round(statistics.median(times), 3),
            "p99_s": round(times[int(len(times) * 0.99)], 3),
            "max_s": round(times[-1], 3),
        },
        "listings": dict(flood.statuses),
        "flood_connections_failed": flood.failed,
    }


def measure(connections: int, seconds: int, active: int | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="zd-noisy-neighbour-") as directory:
        service = filled_server(directory, "max_active_requests", active)
        try:
            report = asyncio.run(flood_while_posting(service, connections, seconds))
            report["no_store_connection_warnings"] = service.log().count("No connection available")
            return report
        finally:
            service.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--active", type=int, help="[server] max_active_requests")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args()
    report = {
        "args": {"connections": args.connections, "seconds": args.seconds, "active": args.active},
        **measure(args.connections, args.seconds, args.active),
    }
    print(json.dumps(report))
    recorded.write(args.results, "noisy-neighbour", report)


if __name__ == "__main__":
    main()
