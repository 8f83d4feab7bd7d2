"""What holding projects to ``[transport] max_messages_per_project`` costs.

* Counting: on each of ``--stores``, a project holding ``--per-queue`` messages in each of
  ``N`` queues (for each ``N`` of ``--queues``) is counted (``Driver.count_messages`` up to
  the default limit) ``--rounds`` times: the median and the longest count, in ms. A process
  counts a project at most every 5 s while it posts far from its limit, and once a second
  while it posts at it.
* Admitting: a post's messages admitted on a project's tally with no count, in µs (in this
  process, the median of 5 runs of 100,000).
* Holding (on a redis-server, in ``--stores``): the store's memory a message of a few bytes
  takes (``INFO memory``, 10,000 posted to one queue), in a queue with no subscription and in
  one with ``--subscriptions`` (each message owed a push to each until it is pushed).

    python -m benchmarks.message_quota [--stores embedded,redis-server,mongodb]
        [--queues 1,100,1000,10000] [--per-queue 1] [--rounds 5] [--subscriptions 20]
        [--results DIR]

Printed as one JSON line and written to ``DIR/message-quota-<time>.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import redis

from benchmarks import recorded
from benchmarks.purge_stall import store
from benchmarks.swift import RESULTS
from tests.helpers.stores import close_test_driver, open_test_driver
from zaqar_delay.clock import FakeClock, SystemClock
from zaqar_delay.conf import Limits
from zaqar_delay.message_quota import MessageQuota
from zaqar_delay.models import NewMessage, NewSubscription

MOST = Limits().max_messages_per_project
HELD_MESSAGES = 10_000


def count_times(uri: str, queues: list[int], per_queue: int, rounds: int) -> dict[str, Any]:
    """For each number of queues, the project filled up to it, then counted ``rounds`` times."""
    driver: Any = open_test_driver(uri)
    clock, filled, measured = FakeClock(), 0, {}
    try:
        batch = [NewMessage('"x"', 3600, 0) for _ in range(per_queue)]
        for wanted in sorted(queues):
            for queue in range(filled, wanted):
                driver.post_messages("p", f"q{queue:06d}", batch, "a" * 32, clock.now_ms())
            filled = wanted
            times = []
            for _ in range(rounds):
                started = time.perf_counter()
                counted = driver.count_messages("p", MOST, clock.now_ms())
                times.append((time.perf_counter() - started) * 1000)
            assert counted == wanted * per_queue, (counted, wanted)
            measured[str(wanted)] = {
                "median_ms": round(statistics.median(times), 2),
                "max_ms": round(max(times), 2),
            }
        return measured
    finally:
        close_test_driver(driver)


def held_bytes(uri: str, subscriptions: int) -> dict[str, float]:
    """Bytes of the redis-server's memory a message takes, without and with subscriptions."""
    driver: Any = open_test_driver(uri)
    client = redis.Redis.from_url(uri)
    clock, measured = FakeClock(), {}
    try:
        for subscribed in (0, subscriptions):
            queue = f"held-{subscribed}"
            for n in range(subscribed):
                hook = NewSubscription(f"http://203.0.113.1/hook/{n}", 3600, {}, "s" * 32)
                driver.create_subscription("p", queue, hook, clock.now_ms())
            before = int(client.info("memory")["used_memory"])
            for _ in range(HELD_MESSAGES // 100):
                batch = [NewMessage('"x"', 3600, 0) for _ in range(100)]
                driver.post_messages("p", queue, batch, "a" * 32, clock.now_ms())
            used = int(client.info("memory")["used_memory"]) - before
            measured[f"{subscribed}_subscriptions"] = round(used / HELD_MESSAGES, 1)
        return measured
    finally:
        client.close()
        close_test_driver(driver)


def admit_us() -> float:
    """One post of one message admitted on a tally, far from the limit."""
    runs = []
    for _ in range(5):
        quota = MessageQuota(MOST, lambda project, most, now_ms: 0, SystemClock())
        started = time.perf_counter()
        for _ in range(100_000):
            quota.admit("p", 1)
        runs.append((time.perf_counter() - started) / 100_000 * 1e6)
    return round(statistics.median(runs), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="embedded,redis-server,mongodb")
    parser.add_argument("--queues", default="1,100,1000,10000")
    parser.add_argument("--per-queue", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--subscriptions", type=int, default=20)
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args()
    queues = [int(n) for n in args.queues.split(",")]
    report: dict[str, Any] = {
        "args": {"queues": queues, "per_queue": args.per_queue, "rounds": args.rounds},
        "admit_us": admit_us(),
    }
    for name in args.stores.split(","):
        with store(name) as uri:
            report[name] = count_times(uri, queues, args.per_queue, args.rounds)
            if name == "redis-server":
                report["held_bytes_per_message"] = held_bytes(uri, args.subscriptions)
    print(json.dumps(report))
    recorded.write(args.results, "message-quota", report)


if __name__ == "__main__":
    main()
