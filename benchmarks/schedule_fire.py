"""What firing a batch of schedule ticks together costs a dispatcher, on each store.

On each of ``--stores`` (a redis-server, secantusdb for MongoDB's wire protocol, a Swift
all-in-one), a service in this process writes ``--schedules`` schedules (``every: 60``) on one
queue, then fires one tick of each, all in one batch (``Schedules.fire_many``, as the push
dispatcher hands it a leased batch), ``--rounds`` times, a minute of its clock apart. The
first batch also creates the schedules' state queues; the later ones replace their states.

    python -m benchmarks.schedule_fire [--stores redis-server,mongodb,swift]
        [--schedules 100] [--rounds 3] [--results DIR]

Prints, and writes to ``DIR/schedule-fire-<time>.json``, each batch's wall time in ms by store
(the first batch apart).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import falcon.testing

from benchmarks import recorded
from benchmarks.dedup_posts import STORES, running
from benchmarks.swift import RESULTS
from tests.helpers.api import HEADERS, PROJECT, settings_on
from tests.helpers.stores import close_test_driver, open_test_driver
from zaqar_delay.api.app import build
from zaqar_delay.clock import FakeClock
from zaqar_delay.schedules import names

MINUTE_MS = 60_000


def batch_times_ms(uri: str, schedules: int, rounds: int) -> list[float]:
    """The wall time of each of ``rounds`` batches of ``schedules`` ticks, one per schedule."""
    clock = FakeClock()
    driver = open_test_driver(uri)
    try:
        app, service = build(settings_on(uri), driver=driver, clock=clock)
        client = falcon.testing.TestClient(app)
        written_ms = clock.now_ms()
        every_minute: dict[str, Any] = {"every": 60, "message": {"body": "tick"}}
        schedule_names = [f"s{i}" for i in range(schedules)]
        for name in schedule_names:
            path = f"/v2/queues/q/schedules/{name}"
            answer = client.simulate_put(path, json=every_minute, headers=HEADERS)
            assert answer.status_code == 201, answer.text
        records = service.schedules.records
        definitions, _ = records.definitions_and_states(PROJECT, "q", schedule_names)
        times = []
        for fired in range(rounds):
            clock.advance(ms=MINUTE_MS)
            ticks = [
                {
                    "schedule": name,
                    "generation": (definitions[name] or {})["generation"],
                    "slot": written_ms + MINUTE_MS * (fired + 1),
                    "fires": fired,
                }
                for name in schedule_names
            ]
            started = time.perf_counter()
            outcomes = service.schedules.fire_many(
                PROJECT, names.tick_queue("q"), ticks, clock.now_ms()
            )
            times.append(round((time.perf_counter() - started) * 1000, 1))
            assert not any(outcomes), outcomes
        return times
    finally:
        close_test_driver(driver)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--schedules", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args()
    batches: dict[str, list[float]] = {}
    for store in args.stores.split(","):
        with running(store) as uri:
            batches[store] = batch_times_ms(uri, args.schedules, args.rounds)
    report = {
        "args": {"schedules": args.schedules, "rounds": args.rounds},
        "batch_ms": batches,
    }
    print(json.dumps(report, indent=1))
    recorded.write(args.results, "schedule-fire", report)


if __name__ == "__main__":
    main()
