"""Concurrent one-message claims racing for the oldest messages, on each store, at the driver.

On each of ``--stores`` (a redis-server, secantusdb for MongoDB's wire protocol, a Swift
all-in-one), each round posts ``--messages`` messages to a fresh queue, then ``--contenders``
threads, released together by a barrier, each make one claim of one message. Every claim
should get a message while any is left: an empty answer with messages still claimable is a
spurious "nothing to claim". Printed per store: claims that got a message, claims that should
have and did not (spurious empties), and claim latency (p50, max) in ms.

    python -m benchmarks.claim_race [--stores redis-server,mongodb,swift] [--contenders 12]
        [--messages 12] [--rounds 5] [--results DIR]

Writes ``DIR/claim-race-<time>.json`` as well.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import recorded
from benchmarks.dedup_posts import STORES, running
from benchmarks.swift import RESULTS
from tests.helpers.stores import close_test_driver, open_test_driver
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import ClaimTimes, NewMessage


def race(uri: str, contenders: int, messages: int) -> tuple[list[bool], list[float]]:
    """One round: whether each claim got a message, and how long each took (s)."""
    driver: Any = open_test_driver(uri)
    clock = FakeClock()
    try:
        batch = [NewMessage(json.dumps(n), 3600, 0) for n in range(messages)]
        for start in range(0, messages, 20):
            driver.post_messages("p", "q", batch[start : start + 20], "a" * 32, clock.now_ms())
        barrier = threading.Barrier(contenders)
        got: list[bool] = []
        took: list[float] = []

        def claim_one() -> None:
            barrier.wait()
            started = time.perf_counter()
            held = driver.create_claim("p", "q", ClaimTimes(300, 60), 1, clock.now_ms())
            took.append(time.perf_counter() - started)
            got.append(held is not None)

        threads = [threading.Thread(target=claim_one) for _ in range(contenders)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return got, took
    finally:
        close_test_driver(driver)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--contenders", type=int, default=12)
    parser.add_argument("--messages", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args()
    report: dict[str, Any] = {"contenders": args.contenders, "messages": args.messages}
    for store in args.stores.split(","):
        got: list[bool] = []
        took: list[float] = []
        with running(store) as uri:
            for _ in range(args.rounds):
                round_got, round_took = race(uri, args.contenders, args.messages)
                got += round_got
                took += round_took
        should = min(args.contenders, args.messages) * args.rounds
        report[store] = {
            "claims": len(got),
            "got_a_message": sum(got),
            "spurious_empty": should - sum(got),
            "p50_ms": round(statistics.median(took) * 1000, 1),
            "max_ms": round(max(took) * 1000, 1),
        }
        print(store, json.dumps(report[store]), flush=True)
    recorded.write(args.results, "claim-race", report)


if __name__ == "__main__":
    main()
