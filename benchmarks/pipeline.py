"""Rows per second of ``zaqar-delay-pipeline schedule`` and ``report`` in Spark local mode.

``schedule``: writes a CSV of ``--rows`` rows (8 queues, delays up to 900 s, bodies of about
100 bytes), starts a zaqar-delay-server on an embedded store, and times the whole job (read,
check, post, rejects, counts) against it, then checks the server holds every row.

``report``: writes ``--events`` journal events with Spark (posted, claimed, deleted for each
message, a released + second claim for one message in ten, and the posted and deleted lines
again, marked repeats, for one in ``--repeats-every``), then times the report job.

    python -m benchmarks.pipeline schedule [--rows 1000000] [--master local[*]]
    python -m benchmarks.pipeline report [--events 10000000] [--master local[*]]
        [--shuffle-partitions N]

Both share the machine's cores with everything they start (the server, its store, Spark's
Python workers), as a single-machine deployment would.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

from testbed.processes import ServiceProcess
from zaqar_delay.pipeline import report, schedule
from zaqar_delay.pipeline.cli import spark_session
from zaqar_delay.pipeline.client import Target

PROJECT = "pipeline-bench"


def session(args: argparse.Namespace) -> Any:
    """The job's Spark session; ``--shuffle-partitions`` replaces Spark's default (200), which
    costs a small run one task per partition of every shuffle."""
    spark: Any = spark_session(args.master, "zaqar-delay-pipeline benchmark")
    if args.shuffle_partitions:
        spark.conf.set("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
    return spark


def write_rows(path: Path, rows: int) -> None:
    generator = random.Random(20261122)
    with open(path, "w", encoding="ascii") as handle:
        handle.write("queue,body,delay,ttl\n")
        for i in range(rows):
            body = f'"{{""order"": {i}, ""note"": ""{"x" * 60}""}}"'
            handle.write(f"q{i % 8},{body},{generator.randrange(901)},3600\n")


def bench_schedule(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    source = work / "rows.csv"
    started = time.perf_counter()
    write_rows(source, args.rows)
    print(f"wrote {args.rows:,} rows in {time.perf_counter() - started:.1f} s", flush=True)
    (work / "server").mkdir()
    service = ServiceProcess(workers=args.workers, data_dir=str(work / "server")).start()
    try:
        spark = session(args)
        started = time.perf_counter()
        summary = schedule.run(
            spark,  # type: ignore[arg-type]
            str(source),
            Target(service.url, PROJECT, max_messages=args.batch_size),
            str(work / "rejects"),
            now_ms=time.time_ns() // 1_000_000,
            partitions=args.partitions,
        )
        elapsed = time.perf_counter() - started
        stored = sum(
            requests.get(
                f"{service.url}/v2/queues/q{q}/stats",
                headers={
                    "Client-ID": "5b0ff36c-2a4f-4a0c-9a52-6d3e1f0c7b21",
                    "X-Project-ID": PROJECT,
                },
                timeout=30,
            ).json()["messages"]["total"]
            for q in range(8)
        )
    finally:
        service.stop()
    return {
        "job": "schedule",
        "rows": args.rows,
        "seconds": round(elapsed, 2),
        "rows_per_s": round(args.rows / elapsed),
        "scheduled": summary.scheduled,
        "rejected": summary.rejected,
        "retried_posts": summary.retried_posts,
        "stored_on_server": stored,
    }


def write_journal(spark: Any, path: Path, events: int, repeats_every: int) -> None:
    """``events`` journal events: 3 per message, 5 for one message in ten; and repeats of the
    ``posted`` and ``deleted`` lines (a client's post retried with its dedup id, its delete
    retried) for one message in ``repeats_every`` (0: none), which the report counts once."""
    from pyspark.sql import functions as F

    messages = events * 10 // 32
    base = 1_800_000_000_000
    ids = spark.range(messages).select(
        F.col("id"),
        F.concat(F.lit("q"), (F.col("id") % 8).cast("string")).alias("queue"),
        (F.lit(base) + F.col("id") * 20).alias("posted_ts"),
        (F.lit(base) + F.col("id") * 20 + (F.col("id") % 900) * 1000).alias("due"),
        (F.col("id") % 10 == 0).alias("released"),
        (F.lit(repeats_every > 0) & (F.col("id") % max(1, repeats_every) == 0)).alias("repeated"),
    )
    lateness = (F.col("id") * 7919 % 50).cast("long")
    first = F.col("due") + lateness
    released, repeated = ids.filter("released"), ids.filter("repeated")

    def lines(frame: Any, ts: Any, event: str, **fields: Any) -> Any:
        """One journal line per row of ``frame``; fields not named are absent."""
        return frame.select(
            ts.cast("long").alias("ts"),
            F.lit(event).alias("event"),
            F.lit("p").alias("project"),
            F.col("queue"),
            F.hex(F.col("id")).alias("message_id"),
            *[F.lit(v).alias(k) if isinstance(v, int) else v.alias(k) for k, v in fields.items()],
        )

    due, first_claim, second_claim = F.col("due"), F.hex(F.col("id") * 3), F.hex(F.col("id") * 5)
    parts = [
        lines(ids, F.col("posted_ts"), "posted", due=due, ttl=3600),
        lines(repeated, F.col("posted_ts") + 50, "posted", repeat=F.lit(True)),
        lines(ids, first, "claimed", claim_id=first_claim, claim_count=1, due=due),
        lines(released, first + 100, "released", claim_id=first_claim),
        lines(released, first + 200, "claimed", claim_id=second_claim, claim_count=2, due=due),
        lines(ids, first + 300, "deleted"),
        lines(repeated, first + 350, "deleted", repeat=F.lit(True)),
    ]
    union = parts[0]
    for more in parts[1:]:
        union = union.unionByName(more, allowMissingColumns=True)
    union.write.mode("overwrite").option("ignoreNullFields", True).json(str(path))
    for part in path.glob("part-*.json"):
        part.rename(part.with_suffix(".jsonl"))


def bench_report(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    spark = session(args)
    journal = work / "journal"
    started = time.perf_counter()
    write_journal(spark, journal, args.events, args.repeats_every)
    print(f"wrote the journal in {time.perf_counter() - started:.1f} s", flush=True)
    size = sum(p.stat().st_size for p in journal.glob("*.jsonl"))
    started = time.perf_counter()
    result = report.run(spark, str(journal), str(work / "report"))  # type: ignore[arg-type]
    elapsed = time.perf_counter() - started
    return {
        "job": "report",
        "events": result["events"],
        "repeats_every": args.repeats_every,
        "journal_bytes": size,
        "seconds": round(elapsed, 2),
        "events_per_s": round(result["events"] / elapsed),
        "deliveries_before_due": result["deliveries_before_due"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job", choices=["schedule", "report"])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--repeats-every", type=int, default=100, help="(report)")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--workers", type=int, default=2, help="server workers (schedule)")
    parser.add_argument("--partitions", type=int, help="posting tasks (schedule)")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--shuffle-partitions", type=int, help="spark.sql.shuffle.partitions")
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    work = Path(tempfile.mkdtemp(prefix="zd-pipeline-bench-"))
    try:
        bench = bench_schedule if args.job == "schedule" else bench_report
        outcome = bench(args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(outcome))
    rate = outcome.get("rows_per_s") or outcome.get("events_per_s")
    print(f"{args.job}: {rate:,} rows/s ({outcome['seconds']} s, master {args.master})")


if __name__ == "__main__":
    main()
