"""What purging or deleting a big queue costs the other queues of its Redis store.

On each of ``--stores`` (the embedded store, a redis-server), posts ``--messages`` messages to
one queue (a few hundred of them claimed), then purges it (``--action purge``) or deletes it
(``--action delete``) at the driver while another queue of the store is posted to, one
message at a time, from another thread. Printed (one JSON line) per store: how long the purge
or deletion took, and the other queue's post latency meanwhile (p50, p99, max, in ms): the
longest any other client of the store waited behind it.

    python -m benchmarks.purge_stall [--stores embedded,redis-server] [--messages 1000000]
        [--action purge] [--results DIR]

Writes ``DIR/purge-stall-<time>.json`` as well.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks import recorded
from benchmarks.dedup_posts import running
from benchmarks.swift import RESULTS
from tests.helpers.stores import close_test_driver, open_test_driver
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import ClaimTimes, NewMessage
from zaqar_delay.storage.redis.embedded import EmbeddedRedis

CLIENT = "a" * 32


@contextlib.contextmanager
def store(name: str) -> Iterator[str]:
    """A fresh store of kind ``name``, stopped afterwards; yields its URI."""
    if name != "embedded":
        with running(name) as uri:
            yield uri
        return
    with tempfile.TemporaryDirectory(prefix="zd-purge-") as directory:
        embedded = EmbeddedRedis(str(Path(directory) / "store.db"))
        try:
            yield str(embedded.uri)
        finally:
            embedded.close()


def fill(driver: Any, clock: FakeClock, messages: int) -> None:
    for start in range(0, messages, 1000):
        count = min(1000, messages - start)
        batch = [NewMessage(json.dumps({"n": start + n}), 3600, 0) for n in range(count)]
        driver.post_messages("p", "big", batch, CLIENT, clock.now_ms())
    for _ in range(min(20, messages // 1000)):
        driver.create_claim("p", "big", ClaimTimes(300, 60), 20, clock.now_ms())


def measure(uri: str, messages: int, action: str) -> dict[str, Any]:
    driver: Any = open_test_driver(uri)
    clock = FakeClock()
    try:
        fill(driver, clock, messages)
        waits: list[float] = []
        done = threading.Event()

        def other_tenant() -> None:
            one = [NewMessage('"x"', 3600, 0)]
            while not done.is_set():
                started = time.perf_counter()
                driver.post_messages("p", "other", one, CLIENT, clock.now_ms())
                waits.append(time.perf_counter() - started)
                time.sleep(0.001)

        beside = threading.Thread(target=other_tenant)
        beside.start()
        time.sleep(0.2)
        started = time.perf_counter()
        if action == "purge":
            driver.purge("p", "big")
        else:
            driver.delete_queue("p", "big")
        took = time.perf_counter() - started
        time.sleep(0.2)
        done.set()
        beside.join()
        waits.sort()
        return {
            f"{action}_s": round(took, 3),
            "other_posts": len(waits),
            "other_p50_ms": round(waits[len(waits) // 2] * 1000, 2),
            "other_p99_ms": round(waits[int(len(waits) * 0.99)] * 1000, 2),
            "other_max_ms": round(waits[-1] * 1000, 2),
        }
    finally:
        close_test_driver(driver)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="embedded,redis-server")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--action", choices=("purge", "delete"), default="purge")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args()
    report: dict[str, Any] = {"args": {"messages": args.messages, "action": args.action}}
    for name in args.stores.split(","):
        with store(name) as uri:
            report[name] = measure(uri, args.messages, args.action)
    print(json.dumps(report))
    recorded.write(args.results, "purge-stall", report)


if __name__ == "__main__":
    main()
