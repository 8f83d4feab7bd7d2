"""Each load-generator scenario completes against a real server and prints valid JSON.

A second or two each, with tiny sizes: this checks the benchmarks still work, never how fast
anything is (numbers come from running them by hand; see benchmarks/README.rst).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import ServiceProcess

LOADGEN = Path(__file__).resolve().parents[2] / "benchmarks" / "loadgen.py"

SMALL = {
    "produce": ["--seconds", "1", "--connections", "4"],
    "produce-batch": ["--seconds", "1", "--connections", "4"],
    "consume": ["--seconds", "1", "--connections", "4", "--prefill", "400"],
    "mixed": ["--seconds", "1", "--connections", "4"],
    "lateness": ["--messages", "40", "--spread", "0.2", "--max-delay", "1", "--wait", "5"],
    "backlog": ["--sizes", "100,300", "--samples", "5", "--drop-after"],
    "waiting": ["--waiters", "20"],
}


@pytest.mark.parametrize("scenario", sorted(SMALL))
def test_scenario_prints_one_json_document(scenario: str, embedded_service: ServiceProcess) -> None:
    run = subprocess.run(
        [sys.executable, str(LOADGEN), scenario, "--url", embedded_service.url, *SMALL[scenario]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    document, human = run.stdout.strip().splitlines()
    report = json.loads(document)
    assert report["scenario"] == scenario
    assert human.startswith(scenario)
    assert report["client_cpu_percent"] >= 0
    if scenario == "lateness":
        assert (report["early"], report["never_delivered"]) == (0, 0)
    if scenario == "waiting":
        assert report["served_exactly_one"] == 20
    if scenario == "backlog":
        assert [s["claims_missing_the_due_message"] for s in report["sizes"]] == [0, 0]
    if scenario in ("produce", "produce-batch", "consume", "mixed"):
        assert report["messages_per_s"] > 0
