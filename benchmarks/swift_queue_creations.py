"""Two server processes creating one queue at once on Swift, and what a queue's creation costs.

On one Swift all-in-one (``testbed/swift_aio.py``), ``--queues`` times: two drivers (one
client each) PUT a new queue at the same moment with different metadata. Counted: the pairs
where Swift accepted both create-only writes of the queue's metadata object (both passed
``If-None-Match: *`` before either was committed), where both PUTs answered that they created
the queue, and where a PUT that answered so finds another's metadata kept (its default delay
lost). Then ``--queues`` PUTs one after another: the latency of a creation and of a PUT of a
queue that exists. Prints one JSON line.

    python -m benchmarks.swift_queue_creations [--queues 100]
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import time
import uuid

from testbed.swift_aio import SwiftAllInOne
from tests.helpers.swift import CreationsSeen, create_queue_at_once
from zaqar_delay.storage.swift.access import access_from_uri
from zaqar_delay.storage.swift.driver import SwiftDriver

PROJECT = "bench"
METADATA = ({"_default_message_delay": 10}, {"other": 1})


def _latencies_ms(driver: SwiftDriver, queues: list[str]) -> dict[str, float]:
    took = []
    for queue in queues:
        sent = time.perf_counter()
        driver.create_queue(PROJECT, queue, METADATA[0], int(time.time() * 1000))
        took.append((time.perf_counter() - sent) * 1000)
    took.sort()
    return {"p50": round(statistics.median(took)), "p95": round(took[int(len(took) * 0.95) - 1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=100)
    args = parser.parse_args()
    aio = SwiftAllInOne().start()
    try:
        access = access_from_uri(aio.store_uri)
        accepted: collections.Counter[str] = collections.Counter()
        namespace = f"bench{uuid.uuid4().hex[:8]}"
        drivers = [SwiftDriver(CreationsSeen(access, accepted), namespace) for _ in METADATA]
        drivers[0].prepare()
        counts = {"pairs": args.queues, "both_accepted": 0, "both_said_created": 0, "lost": 0}
        for number in range(args.queues):
            answers = create_queue_at_once(drivers, PROJECT, f"race{number}", METADATA)
            kept = drivers[0].get_metadata(PROJECT, f"race{number}")
            counts["both_said_created"] += all(answers)
            counts["lost"] += any(said and kept != METADATA[i] for i, said in enumerate(answers))
        counts["both_accepted"] = sum(1 for n in accepted.values() if n > 1)
        fresh = [f"seq{number}" for number in range(args.queues)]
        result = {
            **counts,
            "create_ms": _latencies_ms(drivers[0], fresh),
            "exists_ms": _latencies_ms(drivers[0], fresh),
        }
        for driver in drivers:
            driver.close()
        print(json.dumps(result), flush=True)
    finally:
        aio.stop()


if __name__ == "__main__":
    main()
