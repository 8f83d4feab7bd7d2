"""What pooling costs, and how it spreads queues: one Redis unpooled, then the same pooled.

Starts two redis-servers, A and B, and two zaqar-delay-servers with ``--workers`` workers:

- "unpooled": ``[storage] uri`` on A;
- "pooled": ``[DEFAULT] pooling``, its catalog on B, one pool "a" on A (a key prefix of its own),
  registered through the admin API.

Both keep their messages on A, so pooled / unpooled is the cost of pooling itself: finding
each queue's pool (a cached lookup after a queue's first request) and placing new queues.
Rounds alternate which server goes first; the summary holds medians.

Then the spread: pool "a" gets weight ``--weight-a`` and a pool "b" on B weight
``--weight-b``; ``--spread-queues`` new queues are created with one message each on the pooled
server. Printed: the queues each pool holds (from the catalog), the proportion expected from
the weights, the message keys on each redis-server, and a produce run over both pools.

    python -m benchmarks.pooling [--seconds 10] [--rounds 3] [--spread-queues 400]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis
import requests

from benchmarks.loadgen import run_in_child
from testbed.processes import RedisServer, ServiceProcess
from zaqar_delay.conf import STORAGE_URI_ENV

CATALOG_PREFIX = "zd"
CATALOG_REFRESH = 1.0  # the default of [pooling:catalog] catalog_refresh
POOL_PREFIX = {"a": "pool-a", "b": "pool-b"}
HEADERS = {"Client-ID": str(uuid.uuid4()), "X-Project-ID": "bench"}


def pooled_config() -> str:
    """A config file turning pooling and the noauth admin API on."""
    path = Path(tempfile.mkdtemp(prefix="zd-pooling-bench-")) / "pooling.conf"
    path.write_text("[DEFAULT]\npooling = true\nadmin_mode = true\n")
    return str(path)


def put_pool(url: str, name: str, store: RedisServer, weight: int) -> None:
    document = {"uri": store.url, "weight": weight, "options": {"key_prefix": POOL_PREFIX[name]}}
    answer = requests.put(f"{url}/v2/pools/{name}", json=document, headers=HEADERS, timeout=30)
    if answer.status_code not in (201, 204):
        raise SystemExit(f"registering pool {name}: {answer.status_code} {answer.text}")


def patch_weight(url: str, name: str, weight: int) -> None:
    answer = requests.patch(
        f"{url}/v2/pools/{name}", json={"weight": weight}, headers=HEADERS, timeout=30
    )
    if answer.status_code != 200:
        raise SystemExit(f"weighting pool {name}: {answer.status_code} {answer.text}")


def run_scenario(scenario: str, url: str, label: str, args: argparse.Namespace) -> dict[str, Any]:
    extra = ["--seconds", str(args.seconds), "--connections", str(args.connections)]
    extra += ["--queues", str(args.queues)]
    if scenario == "consume":
        extra += ["--prefill", str(args.prefill)]
    return run_in_child(scenario, url, label, extra)


def spread(url: str, catalog: redis.Redis, queues: int) -> dict[str, int]:
    """Create ``queues`` queues with one message each; the queues each pool holds after."""
    session = requests.Session()
    session.headers.update(HEADERS)
    for number in range(queues):
        answer = session.post(
            f"{url}/v2/queues/spread-{number:05d}/messages",
            json={"messages": [{"body": number, "ttl": 3600}]},
            timeout=30,
        )
        if answer.status_code != 201:
            raise SystemExit(f"posting to spread-{number:05d}: {answer.text}")
    counts = {}
    for name in POOL_PREFIX:
        members = catalog.smembers(f"{CATALOG_PREFIX}:{{catalog}}:on:{name}")
        counts[name] = sum(1 for m in members if m.decode().startswith("bench/spread-"))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--prefill", type=int, default=50_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scenarios", default="produce,produce-batch,consume")
    parser.add_argument("--spread-queues", type=int, default=400)
    parser.add_argument("--weight-a", type=int, default=100)
    parser.add_argument("--weight-b", type=int, default=300)
    args = parser.parse_args()
    store_a, store_b = RedisServer().start(), RedisServer().start()
    services = {
        "unpooled": ServiceProcess(env={STORAGE_URI_ENV: store_a.url}, workers=args.workers),
        "pooled": ServiceProcess(
            env={STORAGE_URI_ENV: store_b.url},
            workers=args.workers,
            args=["--config-file", pooled_config()],
        ),
    }
    try:
        for service in services.values():
            service.start().wait_for_workers()
        pooled_url = services["pooled"].url
        put_pool(pooled_url, "a", store_a, args.weight_a)
        rates: dict[str, dict[str, list[float]]] = {}
        for round_number in range(args.rounds):
            order = list(services.items())
            if round_number % 2:
                order.reverse()
            for scenario in args.scenarios.split(","):
                for label, service in order:
                    report = run_scenario(scenario, service.url, label, args)
                    rates.setdefault(scenario, {}).setdefault(label, []).append(
                        report["messages_per_s"]
                    )
        medians = {
            scenario: {label: statistics.median(r) for label, r in by_label.items()}
            for scenario, by_label in rates.items()
        }
        ratios = {
            scenario: round(m["pooled"] / m["unpooled"], 3) for scenario, m in medians.items()
        }
        patch_weight(pooled_url, "a", args.weight_a)
        put_pool(pooled_url, "b", store_b, args.weight_b)
        # Every worker reads the catalog's changes within [pooling:catalog] catalog_refresh.
        time.sleep(2 * CATALOG_REFRESH)
        catalog = redis.Redis(port=store_b.port)
        placed = spread(pooled_url, catalog, args.spread_queues)
        two_pools = run_scenario("produce", pooled_url, "pooled over a and b", args)
        keys = {
            name: sum(1 for _ in redis.Redis(port=store.port).scan_iter(f"{POOL_PREFIX[name]}:*"))
            for name, store in (("a", store_a), ("b", store_b))
        }
        total_weight = args.weight_a + args.weight_b
        summary = {
            "rounds": args.rounds,
            "seconds": args.seconds,
            "workers": args.workers,
            "messages_per_s": medians,
            "pooled_over_unpooled": ratios,
            "spread": {
                "queues": args.spread_queues,
                "weights": {"a": args.weight_a, "b": args.weight_b},
                "queues_per_pool": placed,
                "expected_share": {
                    "a": round(args.weight_a / total_weight, 3),
                    "b": round(args.weight_b / total_weight, 3),
                },
                "share": {
                    name: round(count / max(1, sum(placed.values())), 3)
                    for name, count in placed.items()
                },
                "keys_per_pool": keys,
                "produce_over_both_messages_per_s": two_pools["messages_per_s"],
            },
        }
        print(json.dumps({"summary": summary, "runs": rates}))
        for scenario, by_label in medians.items():
            print(
                f"{scenario}: unpooled {by_label['unpooled']:,.0f}/s, pooled "
                f"{by_label['pooled']:,.0f}/s, pooled/unpooled {ratios[scenario]}"
            )
        share = summary["spread"]
        print(
            f"spread of {args.spread_queues} queues, weights a:b {args.weight_a}:{args.weight_b}:"
            f" {placed} (share {share['share']}, expected {share['expected_share']});"
            f" keys {keys}"
        )
    finally:
        for service in services.values():
            service.stop()
        store_a.stop()
        store_b.stop()


if __name__ == "__main__":
    main()
