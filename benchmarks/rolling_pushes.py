"""Pushes through a rolling stop: how late the pushes come when one of two servers is stopped
while they fall due.

Per round: a redis-server, two zaqar-delay servers on it (two workers each, so four
dispatchers), a webhook receiver on loopback and one subscription. ``--messages`` messages
are posted due ``--spacing-ms`` apart (``deliver_at``), the first 3 s ahead; halfway through
them the first server gets SIGTERM. The round waits for every push (at most
``--wait`` seconds past the last due time) and reports how late each came (arrival minus
``deliver_at``): the median, the largest, how many over 1 s, how many never came and how
many came twice. ``--baseline REV`` runs both servers of another revision (checked out as
``benchmarks.compare`` does). Prints one JSON document per round and a summary; asserts
nothing::

    python -m benchmarks.rolling_pushes --rounds 3
    python -m benchmarks.rolling_pushes --rounds 3 --baseline 87ea7af
"""

from __future__ import annotations

import argparse
import collections
import json
import signal
import statistics
import time
from typing import Any

import requests

from benchmarks.compare import checkout
from testbed.processes import RedisServer, ServiceProcess
from testbed.receiver import receiver
from zaqar_delay.conf import STORAGE_URI_ENV

HEADERS = {"X-Project-ID": "rolling", "Client-ID": "00000000-0000-4000-8000-000000000002"}
LEAD_MS = 3_000
POST_BATCH = 50


def post_due(url: str, queue: str, first_ms: int, count: int, spacing_ms: int) -> None:
    """``count`` messages, the i-th due at ``first_ms + i * spacing_ms`` (body: that time)."""
    dues = [first_ms + i * spacing_ms for i in range(count)]
    for start in range(0, count, POST_BATCH):
        batch = [{"body": due, "deliver_at": due} for due in dues[start : start + POST_BATCH]]
        answer = requests.post(
            f"{url}/v2/queues/{queue}/messages",
            json={"messages": batch},
            headers=HEADERS,
            timeout=30,
        )
        answer.raise_for_status()


def one_round(messages: int, spacing_ms: int, wait_s: float, tree: str | None) -> dict[str, Any]:
    redis = RedisServer().start()
    servers = [
        ServiceProcess(env={STORAGE_URI_ENV: redis.url}, cwd=tree).start().wait_for_workers()
        for _ in range(2)
    ]
    stopping = servers[0]
    assert stopping.process is not None
    try:
        with receiver() as hook:
            queue = f"rolling-{time.time_ns()}"
            subscribed = requests.post(
                f"{stopping.url}/v2/queues/{queue}/subscriptions",
                json={"subscriber": hook.url, "ttl": 3600},
                headers=HEADERS,
                timeout=30,
            )
            subscribed.raise_for_status()
            first_ms = int(time.time() * 1000) + LEAD_MS
            post_due(stopping.url, queue, first_ms, messages, spacing_ms)
            last_ms = first_ms + (messages - 1) * spacing_ms
            time.sleep(max(0.0, (first_ms + (last_ms - first_ms) / 2) / 1000 - time.time()))
            signalled = time.monotonic()
            stopping.process.send_signal(signal.SIGTERM)
            stopping.process.wait(60)
            stop_s = time.monotonic() - signalled
            stopping.process = None
            deadline = time.monotonic() + max(0.0, last_ms / 1000 - time.time()) + wait_s
            while len(hook.received) < messages and time.monotonic() < deadline:
                time.sleep(0.05)
            received = list(hook.received)
    finally:
        for server in servers:
            server.stop()
        redis.stop()
    arrivals = collections.Counter(push.json()["body"] for push in received)
    first_arrival = {}
    for push in sorted(received, key=lambda p: p.at_ns):
        first_arrival.setdefault(push.json()["body"], push.at_ns // 1_000_000)
    late_ms = sorted(at - due for due, at in first_arrival.items())
    return {
        "stop_s": round(stop_s, 2),
        "pushed": len(first_arrival),
        "never": messages - len(first_arrival),
        "twice": sum(1 for count in arrivals.values() if count > 1),
        "median_late_ms": statistics.median(late_ms) if late_ms else None,
        "max_late_ms": late_ms[-1] if late_ms else None,
        "over_1s": sum(1 for late in late_ms if late > 1_000),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--spacing-ms", type=int, default=10)
    parser.add_argument("--wait", type=float, default=45.0, help="seconds past the last due")
    parser.add_argument("--baseline", help="a git revision whose servers to run instead")
    args = parser.parse_args()
    tree = str(checkout(args.baseline)) if args.baseline else None
    rounds = []
    for _ in range(args.rounds):
        rounds.append(one_round(args.messages, args.spacing_ms, args.wait, tree))
        print(json.dumps(rounds[-1]), flush=True)
    summary = {
        "server": f"zaqar-delay@{args.baseline}" if args.baseline else "zaqar-delay",
        "messages": args.messages,
        "spacing_ms": args.spacing_ms,
        "over_1s": [r["over_1s"] for r in rounds],
        "max_late_ms": [r["max_late_ms"] for r in rounds],
        "never": sum(r["never"] for r in rounds),
        "twice": sum(r["twice"] for r in rounds),
    }
    print(
        f"{summary['server']}: pushes over 1 s late per round {summary['over_1s']}, latest "
        f"{summary['max_late_ms']} ms; never pushed {summary['never']}, twice {summary['twice']}"
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
