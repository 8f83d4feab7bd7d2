"""Each load-generator scenario completes against a real server and prints valid JSON.

A second or two each, with tiny sizes: this checks the benchmarks still work, never how fast
anything is (numbers come from running them by hand; see benchmarks/README.rst).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from testbed.processes import ServiceProcess

pytestmark = [pytest.mark.functional, pytest.mark.benchmark]

ROOT = Path(__file__).resolve().parents[2]

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
        [sys.executable, "-m", "benchmarks.loadgen", scenario, "--url", embedded_service.url]
        + SMALL[scenario],
        cwd=ROOT,
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


def run_benchmark(name: str, *args: str) -> dict[str, object]:
    """Run ``python -m benchmarks.<name>`` and return the JSON document it printed last."""
    run = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    documents = [line for line in run.stdout.splitlines() if line.startswith("{")]
    result: dict[str, object] = json.loads(documents[-1])
    return result


def test_journal_benchmark_measures_both_servers() -> None:
    result = run_benchmark(
        "journal", "--seconds", "1", "--rounds", "1", "--prefill", "200", "--connections", "4"
    )
    summary = result["summary"]
    assert isinstance(summary, dict)
    rates = summary["messages_per_s"]
    assert set(rates) == {"produce", "produce-batch", "consume"}
    assert all(r["journal off"] > 0 and r["journal on"] > 0 for r in rates.values())
    assert summary["journal_events"] > 0


def test_pipeline_benchmarks_schedule_and_report() -> None:
    scheduled = run_benchmark("pipeline", "schedule", "--rows", "300", "--master", "local[1]")
    assert scheduled["scheduled"] == scheduled["stored_on_server"] == 300
    # Two shuffle partitions instead of Spark's 200: the same jobs, without 200 tasks a stage.
    small = ("--master", "local[1]", "--shuffle-partitions", "2")
    reported = run_benchmark("pipeline", "report", "--events", "3200", *small)
    assert reported["events"] == 3200 and reported["deliveries_before_due"] == 0


def test_push_benchmark_delivers_every_message_on_time() -> None:
    result = run_benchmark(
        "push", "--rate", "100", "--seconds", "2", "--max-delay", "1", "--drain", "40"
    )
    rate, drain = result["rate"], result["drain"]
    assert isinstance(rate, dict) and isinstance(drain, dict)
    assert rate["posted"] == rate["pushed"] > 0
    assert (rate["early"], rate["never_pushed"], rate["duplicates"]) == (0, 0, 0)
    assert drain["pushed"] == drain["messages"] == 40 and drain["early"] == 0


def test_hostile_retry_benchmark_keeps_pushing_the_other_tenant() -> None:
    result = run_benchmark("hostile_retry", "--seconds", "1", "--hostile", "2")
    assert isinstance(result["victim_pushes"], int) and result["victim_pushes"] > 0
    assert isinstance(result["worker_rss_mib_after"], float)


def test_purge_stall_benchmark_measures_the_other_queue_on_both_stores(tmp_path: Path) -> None:
    result = run_benchmark("purge_stall", "--messages", "3000", "--results", str(tmp_path))
    for store in ("embedded", "redis-server"):
        measured = result[store]
        assert isinstance(measured, dict) and measured["other_posts"] > 0
        assert measured["other_max_ms"] >= measured["other_p50_ms"]
    assert len(list(tmp_path.glob("purge-stall-*.json"))) == 1


def test_slow_readers_benchmark_samples_the_workers_while_clients_stall(
    tmp_path: Path,
) -> None:
    result = run_benchmark(
        "slow_readers", "--connections", "3", "--seconds", "2", "--results", str(tmp_path)
    )
    samples = result["workers_mib_each_second"]
    assert isinstance(samples, list) and len(samples) == 2 and len(samples[0]) == 2
    other = result["other_project"]
    assert isinstance(other, dict) and other["status"] == 200
    assert len(list(tmp_path.glob("slow-readers-*.json"))) == 1


def test_noisy_neighbour_benchmark_times_the_other_projects_posts_beside_a_flood(
    tmp_path: Path,
) -> None:
    result = run_benchmark(
        "noisy_neighbour", "--connections", "3", "--seconds", "2", "--results", str(tmp_path)
    )
    posts = result["other_project_posts"]
    assert isinstance(posts, dict) and posts["count"] > 0 and set(posts["statuses"]) == {"201"}
    listings = result["listings"]
    assert isinstance(listings, dict) and listings.get("200", 0) > 0
    assert len(list(tmp_path.glob("noisy-neighbour-*.json"))) == 1


def test_push_fairness_benchmark_pushes_the_other_tenant_beside_a_backlog() -> None:
    result = run_benchmark(
        "push_fairness", "--seconds", "1", "--subscriptions", "2", "--messages", "20"
    )
    assert result["hostile_pushes_owed"] == 40
    assert isinstance(result["victim_pushed"], int) and result["victim_pushed"] > 0
    assert "p99" in result["victim_lateness_ms"]


def test_memory_benchmark_reports_bytes_per_message_on_each_store() -> None:
    result = run_benchmark("memory", "--messages", "400", "--mongodb-messages", "0", "--no-record")
    # The last document is MongoDB's: the 400 messages are there, with their index entries.
    assert result["messages"] == 400 and isinstance(result["documents"], int)
    assert result["documents"] >= 400
    assert isinstance(result["index_bytes_per_message"], float)
    assert result["index_bytes_per_message"] > 0


def test_soak_delivers_every_message_once_and_records_the_machine_reference() -> None:
    result = run_benchmark(
        "soak",
        *("--minutes", "0.1", "--rate", "40", "--sample", "2"),
        *("--reference-seconds", "1", "--busy", "0.2"),
    )
    assert result["posted"] == result["delivered"]
    assert isinstance(result["posted"], int) and result["posted"] > 0
    assert (result["early"], result["duplicates"], result["errors"]) == (0, 0, {})
    reference = result["hello_world_falcon_requests_per_s"]
    assert isinstance(reference, dict) and reference["before"] > 0 and reference["after"] > 0
    busy = result["busy_cpu_percent"]
    assert isinstance(busy, float) and busy > 0, "the other process took no CPU"
    # Every message went through all three processes: each used CPU and switched context.
    assert isinstance(result["cpu_ms_per_message"], float) and result["cpu_ms_per_message"] > 0
    switches = result["context_switches_per_message"]
    assert isinstance(switches, dict) and set(switches) == {"client", "server", "redis"}
    assert all(per_message > 0 for per_message in switches.values()), switches


def test_failover_benchmark_measures_when_posting_resumes() -> None:
    result = run_benchmark("failover", "--rounds", "1", "--warmup", "1")
    assert result["replica_acks"] == 1
    assert isinstance(result["posting_resumed_s"], float) and result["posting_resumed_s"] > 0
    assert isinstance(result["posts_per_s_before"], float) and result["posts_per_s_before"] > 0


def test_graceful_stop_benchmark_measures_the_stop_and_the_waiting_claims() -> None:
    result = run_benchmark("graceful_stop", "--rounds", "1", "--pooled", "1", "--waiting", "2")
    assert isinstance(result["median_stop_s"], float) and result["median_stop_s"] > 0
    ends = result["waiting_claims"]
    # How they end is tests/functional/test_graceful_stop.py's to check: one may not have
    # reached the server within the benchmark's second on a loaded machine.
    assert isinstance(ends, dict) and sum(ends.values()) == 2


def test_rolling_pushes_benchmark_accounts_for_every_message() -> None:
    result = run_benchmark(
        "rolling_pushes", "--rounds", "1", "--messages", "40", "--spacing-ms", "20", "--wait", "5"
    )
    [over_1s] = result["over_1s"]
    assert isinstance(over_1s, int) and over_1s >= 0
    # When each push came is tests/api/test_push_dispatch.py's to check.
    assert isinstance(result["never"], int) and 0 <= result["never"] <= 40
    assert isinstance(result["twice"], int)


def test_replica_acks_benchmark_measures_each_value() -> None:
    result = run_benchmark(
        "replica_acks", "--acks", "0,1", "--rounds", "1", "--seconds", "1", "--connections", "4"
    )
    medians = result["medians_messages_per_s"]
    assert isinstance(medians, dict) and set(medians) == {"0", "1"}
    assert all(rate > 0 for value in medians.values() for rate in value.values())


def test_pooling_benchmark_compares_both_servers_and_spreads_by_weight() -> None:
    result = run_benchmark(
        "pooling",
        *("--seconds", "1", "--rounds", "1", "--connections", "4", "--prefill", "300"),
        *("--spread-queues", "80", "--weight-a", "100", "--weight-b", "300"),
    )
    summary = result["summary"]
    assert isinstance(summary, dict)
    rates = summary["messages_per_s"]
    assert set(rates) == {"produce", "produce-batch", "consume"}
    assert all(r["unpooled"] > 0 and r["pooled"] > 0 for r in rates.values())
    spread = summary["spread"]
    placed = spread["queues_per_pool"]
    # Every queue was placed, on both pools, the heavier pool holding more.
    assert placed["a"] + placed["b"] == 80
    assert 0 < placed["a"] < placed["b"], placed
    assert spread["keys_per_pool"]["a"] > 0 and spread["keys_per_pool"]["b"] > 0


def test_swift_benchmark_measures_zaqar_delay_on_swift(tmp_path: Path) -> None:
    """Upstream Zaqar's leg needs its virtualenv (installed from PyPI on the first full run);
    the smoke runs zaqar-delay's leg only."""
    run = on_swift(
        "benchmarks.swift",
        *("--messages", "20", "--backlog", "40", "--claims", "3", "--delayed", "8"),
        *("--claim-for", "6", "--results", str(tmp_path)),
    )
    [report] = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert report["server"] == "zaqar-delay"
    assert (report["consumed"], report["consumed_twice"], report["left_after_consume"]) == (
        20,
        0,
        0,
    )
    assert (report["early"], report["claimed_twice"]) == (0, 0)
    assert report["delayed_claimed"] == 8
    assert report["objects_per_message"] > 0 and report["produce_requests_per_message"] > 0
    assert list(tmp_path.glob("swift-*.json"))


def test_swift_patterns_benchmark_measures_each_pattern_and_zaqar_delay(tmp_path: Path) -> None:
    on_swift(
        "benchmarks.swift_patterns",
        *("--operations", "16", "--rounds", "1", "--results", str(tmp_path)),
    )
    [out] = tmp_path.glob("swift-patterns-*.json")
    recorded = json.loads(out.read_text())
    assert set(recorded["patterns"]) == {"get-put-put", "get-put", "put-put", "put"}
    assert all(len(rates) == 1 and rates[0] > 0 for rates in recorded["patterns"].values())
    assert list(recorded["servers"]) == ["zaqar-delay"] and recorded["servers"]["zaqar-delay"] > 0


def on_swift(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a Swift benchmark's zaqar-delay leg (upstream's needs its virtualenv, installed
    from PyPI on the first full run), skipping the test when Swift is not installed."""
    from testbed.swift_aio import missing_binaries

    if missing_binaries():
        pytest.skip(f"Swift's servers are needed ({', '.join(missing_binaries())})")
    return subprocess.run(
        [sys.executable, "-m", module, "--only", "zaqar-delay", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )


def run_on_each_store(
    tmp_path: Path, module: str, *args: str, stores: str | None = None
) -> tuple[list[str], Any]:
    """Run ``benchmarks.<module>`` on ``stores``, by default a redis-server, secantusdb and
    (where its servers are installed) a Swift all-in-one; the stores and the JSON document it
    wrote."""
    from testbed.swift_aio import missing_binaries

    stores = stores or "redis-server,mongodb" + ("" if missing_binaries() else ",swift")
    subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", "--stores", stores, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    [out] = tmp_path.glob("*.json")
    return stores.split(","), json.loads(out.read_text())


def test_dedup_posts_benchmark_measures_each_kind_on_each_store(tmp_path: Path) -> None:
    stores, report = run_on_each_store(
        tmp_path, "dedup_posts", "--posts", "5", "--rounds", "1", "--results", str(tmp_path)
    )
    rates = report["posts_per_s"]
    assert list(rates) == stores
    assert all(len(r) == 1 and r[0] > 0 for kinds in rates.values() for r in kinds.values())
    assert all(set(kinds) == {"plain", "dedup"} for kinds in rates.values())


def test_schedule_fire_benchmark_times_each_batch_on_each_store(tmp_path: Path) -> None:
    stores, report = run_on_each_store(
        tmp_path, "schedule_fire", "--schedules", "3", "--rounds", "2", "--results", str(tmp_path)
    )
    batches = report["batch_ms"]
    assert list(batches) == stores
    assert all(len(times) == 2 and all(t > 0 for t in times) for times in batches.values())


def test_waiting_claims_benchmark_answers_every_waiter(tmp_path: Path) -> None:
    _, report = run_on_each_store(
        tmp_path,
        "waiting_claims",
        *("--waiters", "4", "--rounds", "1", "--results", str(tmp_path)),
        stores="redis-server",
    )
    measured = report["redis-server"]
    assert measured["claims_without_a_message"] == 0
    assert len(measured["last_ms"]) == 1 and measured["first_ms"][0] <= measured["last_ms"][0]


def test_websocket_benchmark_measures_both_transports(tmp_path: Path) -> None:
    report: dict[str, Any] = run_benchmark(
        "websocket",
        *("--seconds", "1", "--clients", "2", "--backlog", "300"),
        *("--notifications", "20", "--results", str(tmp_path)),
    )
    for transport in ("http", "websocket"):
        assert report[transport]["post"]["messages_per_s"] > 0
        assert report[transport]["claim_and_delete"]["messages_per_s"] > 0
    assert report["notifications"]["missing"] == 0
    assert report["notifications"]["early"] == 0
    [recorded] = tmp_path.glob("websocket-*.json")
    assert json.loads(recorded.read_text()) == report


def test_schedules_benchmark_counts_each_fire(tmp_path: Path) -> None:
    report: dict[str, Any] = run_benchmark(
        "schedules",
        *("--schedules", "6", "--queues", "2", "--seconds", "4", "--results", str(tmp_path)),
        *("--misfire", "all", "--kill", "worker", "--neighbour"),
    )
    assert report["kill"]["what"] == "worker" and report["kill"]["gone"] is True
    assert report["schedules_fired"] == 6 and report["fires"] > 0
    assert report["misfire"] == "all"
    assert report["slots_fired_twice"] == 0
    assert report["fired_before_slot"] == 0
    neighbour = report["neighbour"]
    assert neighbour["fires"] > 0 and neighbour["fired_before_slot"] == 0
    assert neighbour["slots_fired_twice"] == 0
    [recorded] = tmp_path.glob("schedules-*.json")
    assert json.loads(recorded.read_text()) == report


def test_message_quota_benchmark_counts_each_store(tmp_path: Path) -> None:
    result = run_benchmark(
        "message_quota",
        "--stores",
        "embedded,mongodb,redis-server",
        "--queues",
        "1,30",
        "--rounds",
        "2",
        "--subscriptions",
        "2",
        "--results",
        str(tmp_path),
    )
    assert float(str(result["admit_us"])) > 0
    for name in ("embedded", "mongodb", "redis-server"):
        counts = result[name]
        assert isinstance(counts, dict) and set(counts) == {"1", "30"}
    held = result["held_bytes_per_message"]
    assert isinstance(held, dict)
    # Each message is owed a push to each of the two subscriptions.
    assert 0 < held["0_subscriptions"] < held["2_subscriptions"]
    assert list(tmp_path.glob("message-quota-*.json"))


def test_race_probe_answers_every_request_without_a_fault() -> None:
    result = run_benchmark(
        "race_probe", "--store", "redis-server", "--seconds", "3", "--threads", "2"
    )
    answers = result["answers"]
    assert isinstance(answers, dict) and sum(answers.values()) > 0
    assert result["faults"] == [] and result["tracebacks"] == 0
