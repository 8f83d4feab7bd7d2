"""What the lifecycle journal costs: the same server with the journal off and on.

Starts two zaqar-delay-servers on embedded stores of their own, one with ``--journal-dir``,
and runs ``loadgen.py`` scenarios against each, alternating which goes first every round.
Prints medians of throughput and of the servers' CPU per message (workers and store, from
/proc: steadier than throughput on a small shared machine), the ratios (on / off), the
journal's bytes per event, and the in-process cost of writing one event.

    python -m benchmarks.journal [--seconds 10] [--rounds 3] [--scenarios produce,consume]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import timeit
from pathlib import Path
from typing import Any

from benchmarks.loadgen import run_in_child
from benchmarks.procstat import cpu_seconds
from testbed.processes import ServiceProcess
from zaqar_delay.journal import Journal
from zaqar_delay.models import Message, NewMessage


def run_scenario(
    scenario: str, service: ServiceProcess, label: str, args: argparse.Namespace
) -> dict[str, Any]:
    """One loadgen run; adds the server's CPU microseconds per message handled."""
    assert service.process is not None
    before = cpu_seconds([service.process.pid])
    extra = ["--seconds", str(args.seconds), "--connections", str(args.connections)]
    if scenario == "consume":
        extra += ["--prefill", str(args.prefill)]
    report = run_in_child(scenario, service.url, label, extra)
    used = cpu_seconds([service.process.pid]) - before
    handled = report["messages_per_s"] * report.get("seconds", args.seconds)
    if scenario == "consume":
        handled += args.prefill  # posting the prefill is part of the server's work
    report["server_cpu_us_per_message"] = round(used / handled * 1e6, 1) if handled else None
    return report


def event_cost_us(directory: Path, events: int = 200_000) -> dict[str, float]:
    """Microseconds to journal one event, per kind, in this process (to a real file)."""
    journal = Journal(str(directory / "micro"))
    new = [NewMessage('{"n":1}', 3600, 5000, "") for _ in range(20)]
    ids = [f"{i:032x}" for i in range(20)]
    message = Message(ids[0], 1, 3600, 0, 3_600_000, 5000, "c" * 32, 1, "client")
    batches = events // 20
    costs = {
        "posted (batch of 20)": timeit.timeit(
            lambda: journal.posted("p", "q", ids, new, range(20), 1, ()), number=batches
        ),
        "claimed (batch of 20)": timeit.timeit(
            lambda: journal.claimed("p", "q", "c" * 32, [message] * 20, 1), number=batches
        ),
        "deleted (one)": timeit.timeit(
            lambda: journal.deleted("p", "q", ids[:1], "c" * 32, 1, ()), number=events
        ),
    }
    journal.close()
    return {kind: round(seconds / events * 1e6, 2) for kind, seconds in costs.items()}


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
        cpu: dict[str, dict[str, list[float]]] = {}
        for round_number in range(args.rounds):
            order = list(services.items())
            if round_number % 2:
                order.reverse()
            for scenario in args.scenarios.split(","):
                for label, service in order:
                    report = run_scenario(scenario, service, label, args)
                    rates = results.setdefault(scenario, {}).setdefault(label, [])
                    rates.append(report["messages_per_s"])
                    costs = cpu.setdefault(scenario, {}).setdefault(label, [])
                    costs.append(report["server_cpu_us_per_message"])
        size, lines = journal_size(journal_dir)
        summary = {
            "rounds": args.rounds,
            "seconds": args.seconds,
            "messages_per_s": {
                scenario: {label: statistics.median(r) for label, r in by_label.items()}
                for scenario, by_label in results.items()
            },
            "server_cpu_us_per_message": {
                scenario: {label: statistics.median(c) for label, c in by_label.items()}
                for scenario, by_label in cpu.items()
            },
            "event_cost_us": event_cost_us(journal_dir),
            "journal_bytes": size,
            "journal_events": lines,
            "bytes_per_event": round(size / lines, 1) if lines else None,
        }
        print(json.dumps({"summary": summary, "runs": results, "cpu": cpu}))
        for scenario, rates in summary["messages_per_s"].items():
            off, on = rates["journal off"], rates["journal on"]
            cpu_off, cpu_on = (summary["server_cpu_us_per_message"][scenario][k] for k in rates)
            print(
                f"{scenario}: off {off:,.0f}/s, on {on:,.0f}/s, on/off {on / off:.3f}; server CPU "
                f"per message off {cpu_off} us, on {cpu_on} us, on/off {cpu_on / cpu_off:.3f}"
            )
        print(f"writing one event: {summary['event_cost_us']} us")
        print(f"journal: {lines:,} events, {size:,} bytes, {summary['bytes_per_event']} B/event")
    finally:
        for service in services.values():
            service.stop()


if __name__ == "__main__":
    main()
