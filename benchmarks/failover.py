"""How long posting stops when a Sentinel-watched primary is killed, and what replica acks cost.

Per round: a primary, two replicas and three Sentinels (``down-after-milliseconds`` 1 s) on
loopback, a zaqar-delay server (two workers) on them with ``[storage] replica_acks``
(``--replica-acks``, 1), and one client posting one message at a time. After ``--warmup``
seconds the primary is killed with SIGKILL; the round reports the posts per second before
the kill and the seconds from the kill to the sending of the first post answered 201. Prints
one JSON document per round and a summary line; asserts nothing::

    python -m benchmarks.failover --rounds 3
    python -m benchmarks.failover --rounds 3 --replica-acks 0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import requests

from testbed.processes import RedisSentinelGroup, ServiceProcess
from zaqar_delay.conf import STORAGE_URI_ENV

HEADERS = {"X-Project-ID": "failover", "Client-ID": "00000000-0000-4000-8000-000000000001"}


def one_round(replica_acks: int, warmup_s: float) -> dict[str, float]:
    group = RedisSentinelGroup(replicas=2, sentinels=3, down_after_ms=1000).start()
    config = os.path.join(tempfile.mkdtemp(prefix="zd-failover-bench-"), "zaqar-delay.conf")
    with open(config, "w") as f:
        f.write(f"[storage]\nreplica_acks = {replica_acks}\nsocket_timeout = 2\n")
    server = ServiceProcess(env={STORAGE_URI_ENV: group.url()}, args=["--config-file", config])
    server.start()
    session = requests.Session()
    session.headers.update(HEADERS)
    url = f"{server.url}/v2/queues/bench/messages"
    try:
        posted, started = 0, time.monotonic()
        while time.monotonic() - started < warmup_s:
            answer = session.post(url, json={"messages": [{"body": posted}]}, timeout=10)
            posted += answer.status_code == 201
        rate = posted / (time.monotonic() - started)
        group.node(group.primary_port()).kill()
        killed = time.monotonic()
        refused = 0
        while True:
            sent = time.monotonic()
            try:
                status = session.post(url, json={"messages": [{"body": -1}]}, timeout=10)
                code = status.status_code
            except requests.RequestException:
                code = 599
            if code == 201:
                break
            refused += 1
            time.sleep(0.02)
        return {
            "replica_acks": replica_acks,
            "posts_per_s_before": round(rate, 1),
            "posting_resumed_s": round(sent - killed, 3),
            "refused_meanwhile": refused,
        }
    finally:
        server.stop()
        group.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--replica-acks", type=int, default=1)
    parser.add_argument("--warmup", type=float, default=5.0)
    options = parser.parse_args()
    rounds = []
    for _ in range(options.rounds):
        result = one_round(options.replica_acks, options.warmup)
        print(json.dumps(result))
        rounds.append(result)
    resumed = [r["posting_resumed_s"] for r in rounds]
    rates = [r["posts_per_s_before"] for r in rounds]
    print(
        f"replica_acks = {options.replica_acks}: posting resumed after median "
        f"{statistics.median(resumed):.2f} s (max {max(resumed):.2f} s) over {len(rounds)} "
        f"kills; {statistics.median(rates):.0f} single-message posts/s before the kill "
        "(one client)"
    )


if __name__ == "__main__":
    main()
