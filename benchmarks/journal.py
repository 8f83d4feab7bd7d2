"""What the lifecycle journal costs: the same server with the journal off and on.

Starts two zaqar-delay-servers on embedded stores of their own, one with ``--journal-dir``,
and runs ``loadgen.py`` scenarios against each, alternating which goes first every round.
Prints medians, the ratio (on / off) and the journal's bytes per event.

    python benchmarks/journal.py [--seconds 10] [--rounds 3] [--scenarios produce,consume]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.processes import ServiceProcess  # noqa: E402


def run_scenario(scenario: str, url: str, label: str, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, str(HERE / "loadgen.py"), scenario, "--url", url, "--label", label]
    command += ["--seconds", str(args.seconds), "--connections", str(args.connections)]
    if scenario == "consume":
        command += ["--prefill", str(args.prefill)]
    run = subprocess.run(command, capture_output=True, text=True, check=True, timeout=3600)
    document, human = run.stdout.strip().splitlines()[-2:]
    print(human, flush=True)
    report: dict[str, Any] = json.loads(document)
    return report


def journal_size(directory: Path) -> tuple[int, int]:
    """(bytes, lines) of every journal file."""
    files = list(directory.glob("*.jsonl"))
    lines = 0
    for path in files:
        with open(path, "rb") as handle:
            lines += sum(1 for _ in handle)
    return sum(p.stat().st_size for p in files), lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--prefill", type=int, default=50_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scenarios", default="produce,produce-batch,consume")
    args = parser.parse_args()
    journal_dir = Path(tempfile.mkdtemp(prefix="zd-journal-bench-"))
    services = {
        "journal off": ServiceProcess(workers=args.workers),
        "journal on": ServiceProcess(
            workers=args.workers, args=["--journal-dir", str(journal_dir)]
        ),
    }
    try:
        for service in services.values():
            service.start()
        results: dict[str, dict[str, list[float]]] = {}
        for round_number in range(args.rounds):
            order = list(services.items())
            if round_number % 2:
                order.reverse()
            for scenario in args.scenarios.split(","):
                for label, service in order:
                    report = run_scenario(scenario, service.url, label, args)
                    rates = results.setdefault(scenario, {}).setdefault(label, [])
                    rates.append(report["messages_per_s"])
        size, lines = journal_size(journal_dir)
        summary = {
            "rounds": args.rounds,
            "seconds": args.seconds,
            "messages_per_s": {
                scenario: {label: statistics.median(r) for label, r in by_label.items()}
                for scenario, by_label in results.items()
            },
            "journal_bytes": size,
            "journal_events": lines,
            "bytes_per_event": round(size / lines, 1) if lines else None,
        }
        print(json.dumps({"summary": summary, "runs": results}))
        for scenario, rates in summary["messages_per_s"].items():
            off, on = rates["journal off"], rates["journal on"]
            print(f"{scenario}: off {off:,.0f}/s, on {on:,.0f}/s, on/off {on / off:.3f}")
        print(f"journal: {lines:,} events, {size:,} bytes, {summary['bytes_per_event']} B/event")
    finally:
        for service in services.values():
            service.stop()


if __name__ == "__main__":
    main()
