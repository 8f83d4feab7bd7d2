"""Throughput of zaqar-delay on one Redis node and on a 3-master Redis Cluster.

Starts both stores on loopback ports (the cluster with ``redis-cli --cluster create``), a
zaqar-delay-server with ``--workers`` workers on each, and runs ``loadgen.py`` scenarios with
``--queues`` queues, which the cluster spreads over its masters. On one small machine the
cluster shares the same cores, so this shows what the cluster costs and that the load spreads;
the gain comes when the masters have machines of their own.

    python -m benchmarks.cluster [--seconds 10] [--queues 12] [--scenarios produce,consume]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import redis

from benchmarks.loadgen import run_in_child
from testbed.processes import RedisCluster, RedisServer, ServiceProcess
from zaqar_delay.conf import STORAGE_URI_ENV


def run_scenario(scenario: str, url: str, label: str, args: argparse.Namespace) -> dict[str, Any]:
    extra = ["--seconds", str(args.seconds), "--queues", str(args.queues)]
    return run_in_child(scenario, url, label, [*extra, "--connections", str(args.connections)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--queues", type=int, default=12)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scenarios", default="produce,produce-batch,consume")
    args = parser.parse_args()
    single, cluster = RedisServer().start(), RedisCluster().start()
    services = {
        "one node": ServiceProcess(env={STORAGE_URI_ENV: single.url}, workers=args.workers),
        "3-master cluster": ServiceProcess(
            env={STORAGE_URI_ENV: cluster.url}, workers=args.workers
        ),
    }
    try:
        for service in services.values():
            service.start()
        results: dict[str, Any] = {}
        for scenario in args.scenarios.split(","):
            for label, service in services.items():
                results.setdefault(scenario, {})[label] = run_scenario(
                    scenario, service.url, label, args
                )
        keys = [redis.Redis(port=node.port).dbsize() for node in cluster.nodes]
        summary = {
            "queues": args.queues,
            "keys_per_master": keys,
            "messages_per_s": {
                scenario: {label: r["messages_per_s"] for label, r in by_store.items()}
                for scenario, by_store in results.items()
            },
        }
        print(json.dumps({"summary": summary, "runs": results}))
        for scenario, rates in summary["messages_per_s"].items():
            line = ", ".join(f"{label} {rate:,.0f}/s" for label, rate in rates.items())
            print(f"{scenario}: {line}")
        print(f"keys per cluster master: {keys}")
    finally:
        for service in services.values():
            service.stop()
        single.stop()
        cluster.stop()


if __name__ == "__main__":
    main()
