"""What a post's Swift requests cost by themselves, beside what each server makes of them.

On one Swift all-in-one (``testbed/swift_aio.py``), ``--threads`` clients (``SwiftClient``, no
API server) each make ``--operations`` / ``--threads`` posts' worth of requests, in each of
these patterns, ``--rounds`` times:

- ``get-put-put``: a zaqar-delay post today (queue metadata GET, due-index entry PUT, message
  PUT);
- ``get-put``: a post whose message is its own due-index entry, one object;
- ``put-put``: today's two objects, with queue metadata read from another store;
- ``put``: upstream Zaqar's post (its metadata is in its Redis management store).

Then the same number of single-message posts through each server (``--workers`` gunicorn
workers, ``--posters`` client threads), as ``benchmarks.swift``'s produce. The ratio of a
server's rate to its pattern's rate is what the server's own work costs; the pattern rates
bound what a change of layout can give.

    python -m benchmarks.swift_patterns [--operations 400] [--threads 8] [--rounds 2] [--posters 4]
        [--only zaqar-delay|Zaqar]
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from benchmarks.swift import RESULTS, Client, in_threads, ours, upstream
from testbed.swift_aio import SwiftAllInOne
from zaqar_delay.storage.swift.access import access_from_uri
from zaqar_delay.storage.swift.connect import SwiftClient

BODY = json.dumps({"b": "x" * 20, "u": "client", "t": 3600, "e": 0, "d": 0}).encode()
CONTENT_TYPE = "application/json"


def new_name() -> str:
    return uuid.uuid4().hex


def read_metadata(client: SwiftClient) -> None:
    client.get("queues", "metadata")


def write_entry(client: SwiftClient) -> None:
    client.put("index", f"d/{new_name()}", b"", CONTENT_TYPE)


def write_message(client: SwiftClient) -> None:
    client.put("messages", new_name(), BODY, CONTENT_TYPE)


PATTERNS: dict[str, list[Callable[[SwiftClient], None]]] = {
    "get-put-put": [read_metadata, write_entry, write_message],
    "get-put": [read_metadata, write_message],
    "put-put": [write_entry, write_message],
    "put": [write_message],
}


def pattern_rate(
    clients: list[SwiftClient], steps: list[Callable[[SwiftClient], None]], n: int
) -> float:
    """Posts' worth of ``steps`` per second, ``n`` of them spread over the clients."""

    def work(i: int) -> None:
        for _ in range(n // len(clients)):
            for step in steps:
                step(clients[i])

    return n / in_threads(len(clients), work)


def server_rate(url: str, threads: int, n: int) -> float:
    """Single-message posts per second through the server at ``url``."""
    client = Client(url)
    client.call("PUT", "/v2/queues/work", json={})
    for k in range(20):  # connections made and the queue's objects cached first
        client.post("work", [{"body": k, "ttl": 3600}])

    def produce(_: int) -> None:
        for k in range(n // threads):
            client.post("work", [{"body": k, "ttl": 3600}])

    return n / in_threads(threads, produce)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--operations", type=int, default=400)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--posters", type=int, default=4)
    parser.add_argument("--only", choices=["zaqar-delay", "Zaqar"], default=None)
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args()
    swift = SwiftAllInOne().start()
    patterns: dict[str, list[float]] = {name: [] for name in PATTERNS}
    servers: dict[str, float] = {}
    try:
        clients = [SwiftClient(access_from_uri(swift.store_uri)) for _ in range(args.threads)]
        try:
            for container in ("queues", "index", "messages"):
                clients[0].put_container(container)
            clients[0].put("queues", "metadata", b"{}", CONTENT_TYPE)
            for _ in range(args.rounds):
                for name, steps in PATTERNS.items():
                    rate = pattern_rate(clients, steps, args.operations)
                    patterns[name].append(round(rate, 1))
                    print(f"{name:>12}: {rate:.0f} posts/s", flush=True)
        finally:
            for client in clients:
                client.close()
        for name, server in (("zaqar-delay", ours), ("Zaqar", upstream)):
            if args.only and args.only != name:
                continue
            with server(swift, args.workers) as url:
                servers[name] = round(server_rate(url, args.posters, args.operations), 1)
            print(f"{name:>12}: {servers[name]:.0f} posts/s through the API", flush=True)
    finally:
        swift.stop()
    args.results.mkdir(exist_ok=True)
    out = args.results / f"swift-patterns-{time.strftime('%Y%m%d-%H%M%S')}.json"
    settings = {key: str(value) for key, value in vars(args).items()}
    out.write_text(
        json.dumps({"args": settings, "patterns": patterns, "servers": servers}, indent=1)
    )
    print(f"raw results: {out}")


if __name__ == "__main__":
    main()
