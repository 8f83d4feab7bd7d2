"""What ``[storage] replica_acks`` costs: produce and consume through a Sentinel group.

One group (a primary, two replicas, three Sentinels, all on loopback and on this machine's
cores), and per round and per ``--acks`` value a fresh zaqar-delay server (two workers) with
that ``replica_acks``, measured with ``loadgen.py`` (``produce``: one message per POST;
``consume``: claims of 10 and their deletes). Values alternate within each round. Prints one
JSON document per measurement, then a summary document (medians per value, and each value's
ratio to the first) and a human line; asserts nothing::

    python -m benchmarks.replica_acks --rounds 2 --acks 0,1,2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from testbed.processes import RedisSentinelGroup, ServiceProcess
from zaqar_delay.conf import STORAGE_URI_ENV

SCENARIOS = ("produce", "consume")


def measure(url: str, scenario: str, seconds: float, connections: int, project: str) -> float:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.loadgen",
            scenario,
            "--url",
            url,
            "--seconds",
            str(seconds),
            "--connections",
            str(connections),
            "--project",
            project,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    document = next(line for line in run.stdout.splitlines() if line.startswith("{"))
    return float(json.loads(document)["messages_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--acks", default="0,1,2", help="replica_acks values, comma-separated")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--connections", type=int, default=16)
    options = parser.parse_args()
    values = [int(v) for v in options.acks.split(",")]
    rates: dict[int, dict[str, list[float]]] = {v: {s: [] for s in SCENARIOS} for v in values}
    group = RedisSentinelGroup().start()
    try:
        for round_number in range(options.rounds):
            for acks in values:
                config = os.path.join(tempfile.mkdtemp(prefix="zd-acks-bench-"), "z.conf")
                with open(config, "w") as f:
                    f.write(f"[storage]\nreplica_acks = {acks}\n")
                server = ServiceProcess(
                    env={STORAGE_URI_ENV: group.url()}, args=["--config-file", config]
                ).start()
                try:
                    for scenario in SCENARIOS:
                        rate = measure(
                            server.url,
                            scenario,
                            options.seconds,
                            options.connections,
                            f"acks{acks}r{round_number}{scenario}",
                        )
                        rates[acks][scenario].append(rate)
                        print(
                            json.dumps(
                                {"replica_acks": acks, "scenario": scenario, "messages_per_s": rate}
                            ),
                            flush=True,
                        )
                finally:
                    server.stop()
    finally:
        group.stop()
    medians = {
        str(acks): {s: round(statistics.median(r[s]), 1) for s in SCENARIOS}
        for acks, r in rates.items()
    }
    first = medians[str(values[0])]
    ratios = {
        acks: {s: round(m[s] / first[s], 2) if first[s] else None for s in SCENARIOS}
        for acks, m in medians.items()
    }
    print(json.dumps({"medians_messages_per_s": medians, "ratio_to_first": ratios}))
    print(
        "; ".join(
            f"replica_acks = {acks}: produce {m['produce']:,.0f}, consume {m['consume']:,.0f} "
            f"messages/s ({ratios[acks]['produce']}x, {ratios[acks]['consume']}x)"
            for acks, m in medians.items()
        )
    )


if __name__ == "__main__":
    main()
