"""Many waiting claims answered by one post, through the real server, on each store.

On each of ``--stores`` (a redis-server, secantusdb for MongoDB's wire protocol, a Swift
all-in-one), a server (gunicorn, ``--workers``) is started on the store; each round
``--waiters`` clients make a waiting claim (``?wait=20&limit=1``) on a fresh queue, then one
post brings as many messages. Printed per store: the time from the post's answer to the first,
the median and the last claim's answer (ms), and claims left without a message (none should be).

    python -m benchmarks.waiting_claims [--stores redis-server,mongodb,swift] [--waiters 40]
        [--rounds 3] [--workers 2] [--stagger S] [--cwd DIR] [--results DIR]

``--cwd`` runs the ``zaqar_delay`` of another checkout (a revision to compare with). Writes
``DIR/waiting-claims-<time>.json`` as well.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import requests

from benchmarks import recorded
from benchmarks.dedup_posts import STORES, running
from benchmarks.swift import RESULTS
from testbed.processes import ServiceProcess
from zaqar_delay.conf import STORAGE_URI_ENV

WAIT_S = 20  # the default max_claim_wait
# Clients start waiting this long before the post: every claim must be asleep in its line.
SETTLE_S = 2.0
HEADERS = {"X-Project-ID": "waiting-bench"}


def one_round(url: str, waiters: int, stagger_s: float) -> tuple[list[float], int]:
    """Answer times (s after the post answered) of the claims that got a message, and how many
    got none. Waiters start ``stagger_s`` apart (so that the server's workers share them)."""
    queue = f"w-{uuid.uuid4().hex[:10]}"
    answered: list[float] = []
    empty = 0

    def claim() -> bool:
        response = requests.post(
            f"{url}/v2/queues/{queue}/claims",
            params={"wait": WAIT_S, "limit": 1},
            headers={**HEADERS, "Client-ID": str(uuid.uuid4())},
            timeout=WAIT_S + 30,
        )
        answered.append(time.perf_counter())
        if response.status_code not in (201, 204):
            response.raise_for_status()
        return response.status_code == 201

    with concurrent.futures.ThreadPoolExecutor(waiters) as pool:
        futures = []
        for _ in range(waiters):
            futures.append(pool.submit(claim))
            time.sleep(stagger_s)
        time.sleep(SETTLE_S)
        response = requests.post(
            f"{url}/v2/queues/{queue}/messages",
            json={"messages": [{"body": n, "ttl": 600} for n in range(waiters)]},
            headers={**HEADERS, "Client-ID": str(uuid.uuid4())},
            timeout=60,
        )
        response.raise_for_status()
        posted = time.perf_counter()
        empty = sum(not future.result() for future in futures)
    return sorted(at - posted for at in answered), empty


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--waiters", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--stagger", type=float, default=0.0, help="seconds between the starts of two waiters"
    )
    parser.add_argument("--cwd", default=None, help="checkout whose zaqar_delay is served")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args()
    report: dict[str, Any] = {
        "waiters": args.waiters,
        "workers": args.workers,
        "stagger_s": args.stagger,
        "cwd": args.cwd,
    }
    for store in args.stores.split(","):
        firsts, medians, lasts, empties = [], [], [], 0
        with running(store) as uri:
            service = ServiceProcess(
                env={STORAGE_URI_ENV: uri}, workers=args.workers, cwd=args.cwd
            ).start()
            try:
                service.wait_for_workers()
                for _ in range(args.rounds):
                    times, empty = one_round(service.url, args.waiters, args.stagger)
                    firsts.append(times[0])
                    medians.append(statistics.median(times))
                    lasts.append(times[-1])
                    empties += empty
            finally:
                service.stop()
        report[store] = {
            "first_ms": [round(s * 1000) for s in firsts],
            "median_ms": [round(s * 1000) for s in medians],
            "last_ms": [round(s * 1000) for s in lasts],
            "claims_without_a_message": empties,
        }
        print(store, json.dumps(report[store]), flush=True)
    recorded.write(args.results, "waiting-claims", report)


if __name__ == "__main__":
    main()
