"""How long a server takes to stop on SIGTERM while clients hold connections, and what
happens to the claims waiting in it.

Per round: a zaqar-delay server (two workers, embedded store), ``--pooled`` clients each
holding a kept-alive connection idle after one request, and ``--waiting`` claims waiting
(``?wait=20``) on an empty queue. Then SIGTERM; the round reports the seconds from the signal
to the server's exit, and how the waiting claims ended (a status code, or ``cut`` for a
connection error). ``--baseline REV`` runs the server of another revision (checked out as
``benchmarks.compare`` does), to measure before and after. Prints one JSON document per
round and a summary; asserts nothing::

    python -m benchmarks.graceful_stop --rounds 3
    python -m benchmarks.graceful_stop --rounds 3 --baseline 9d68eec
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import signal
import statistics
import time
from typing import Any

import requests

from benchmarks.compare import checkout
from testbed.processes import ServiceProcess

HEADERS = {"X-Project-ID": "stop", "Client-ID": "00000000-0000-4000-8000-000000000001"}
WAIT_S = 20


def waiting_claim(url: str) -> str:
    try:
        answer = requests.post(
            f"{url}/v2/queues/empty/claims?wait={WAIT_S}",
            json={"ttl": 60},
            headers=HEADERS,
            timeout=WAIT_S + 30,
        )
    except requests.RequestException:
        return "cut"
    return str(answer.status_code)


def one_round(pooled: int, waiting: int, tree: str | None) -> dict[str, Any]:
    server = ServiceProcess(cwd=tree).start().wait_for_workers()
    assert server.process is not None
    sessions = [requests.Session() for _ in range(pooled)]
    for session in sessions:
        session.get(f"{server.url}/v2/ping", headers=HEADERS, timeout=10)
    with concurrent.futures.ThreadPoolExecutor(max(1, waiting)) as pool:
        claims = [pool.submit(waiting_claim, server.url) for _ in range(waiting)]
        time.sleep(1.0)  # the claims reach the server and fall asleep
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(60)
        stopped_s = time.monotonic() - signalled
        server.process = None
        ends = collections.Counter(claim.result() for claim in claims)
    for session in sessions:
        session.close()
    return {"stop_s": round(stopped_s, 2), "waiting_claims": dict(ends)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pooled", type=int, default=4, help="idle kept-alive connections")
    parser.add_argument("--waiting", type=int, default=4, help="claims waiting at the stop")
    parser.add_argument("--baseline", help="a git revision whose server to stop instead")
    args = parser.parse_args()
    tree = str(checkout(args.baseline)) if args.baseline else None
    rounds = []
    for _ in range(args.rounds):
        rounds.append(one_round(args.pooled, args.waiting, tree))
        print(json.dumps(rounds[-1]), flush=True)
    summary = {
        "server": f"zaqar-delay@{args.baseline}" if args.baseline else "zaqar-delay",
        "pooled": args.pooled,
        "waiting": args.waiting,
        "median_stop_s": statistics.median(r["stop_s"] for r in rounds),
        "waiting_claims": dict(
            sum((collections.Counter(r["waiting_claims"]) for r in rounds), collections.Counter())
        ),
    }
    print(
        f"{summary['server']}: stopped in a median {summary['median_stop_s']} s; waiting "
        f"claims ended {summary['waiting_claims']}"
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
