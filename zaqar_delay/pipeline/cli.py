"""``zaqar-delay-pipeline``: bulk scheduling and delivery reports on Spark.

Local mode on this machine by default; ``--master`` (or ``spark-submit``) for a cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence

from zaqar_delay.conf import load_settings

DEFAULT_MASTER = "local[*]"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="zaqar-delay-pipeline",
        description="Schedule delayed messages from a dataset, or report on deliveries from "
        "the lifecycle journal, with Spark.",
    )
    parser.add_argument(
        "--master",
        help=f"Spark master URL (default: spark-submit's, else {DEFAULT_MASTER})",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    schedule = commands.add_parser("schedule", help="post the rows of a dataset as messages")
    schedule.add_argument("--input", required=True, help="CSV, JSON lines or Parquet (file or dir)")
    schedule.add_argument("--url", required=True, help="the zaqar-delay server, http://host:port")
    schedule.add_argument("--project", default="default", help="X-Project-ID to post as")
    schedule.add_argument("--rejects", help="where refused rows go (default: INPUT.rejects)")
    schedule.add_argument("--format", choices=["csv", "jsonl", "parquet"], help="input format")
    schedule.add_argument(
        "--config-file",
        action="append",
        default=[],
        help="the server's configuration file, for its [transport] limits (may be repeated)",
    )
    schedule.add_argument("--token", help="Keystone token (default: $OS_AUTH_TOKEN)")
    schedule.add_argument("--partitions", type=int, help="concurrent posting tasks")
    schedule.add_argument("--batch-size", type=int, default=100, help="messages per post")
    schedule.add_argument("--attempts", type=int, default=8, help="tries per post on 503")

    report = commands.add_parser("report", help="delivery analytics from the journal")
    report.add_argument("--journal", required=True, help="journal directory or file")
    report.add_argument("--out", required=True, help="output directory (local)")

    for sub in (schedule, report):
        sub.add_argument("--master", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def spark_session(master: str | None, app_name: str) -> object:
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name).config("spark.sql.session.timeZone", "UTC")
    if not master and not SparkConf().contains("spark.master"):  # not under spark-submit
        master = DEFAULT_MASTER
    if master:
        builder = builder.master(master)
    if (master or "").startswith("local"):
        # Local workers run this interpreter, where zaqar-delay is installed (on a cluster
        # PYSPARK_PYTHON names the executors' interpreter).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return builder.getOrCreate()


def schedule(args: argparse.Namespace) -> int:
    from zaqar_delay.pipeline import schedule as job
    from zaqar_delay.pipeline.client import Target

    limits = load_settings(args.config_file).limits
    target = Target(
        url=args.url,
        project=args.project,
        token=args.token or os.environ.get("OS_AUTH_TOKEN") or None,
        max_messages=args.batch_size,
        attempts=args.attempts,
    )
    spark = spark_session(args.master, "zaqar-delay-pipeline schedule")
    rejects = args.rejects or args.input.rstrip("/") + ".rejects"
    summary = job.run(
        spark,  # type: ignore[arg-type]
        args.input,
        target,
        rejects,
        fmt=args.format,
        limits=limits,
        now_ms=time.time_ns() // 1_000_000,
        partitions=args.partitions,
    )
    print("\n".join(summary.lines()))
    return 0


def report(args: argparse.Namespace) -> int:
    from zaqar_delay.pipeline import report as job

    spark = spark_session(args.master, "zaqar-delay-pipeline report")
    result = job.run(spark, args.journal, args.out)  # type: ignore[arg-type]
    totals = result["totals"]
    print(json.dumps({"events": result["events"], **totals}))
    print(f"deliveries before due: {result['deliveries_before_due']}")
    print(f"per_minute/, per_queue/ (Parquet), summary.json and lateness.png in {args.out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        from zaqar_delay.pipeline.client import PostingFailed
        from zaqar_delay.pipeline.schedule import InputError
    except ImportError as exc:  # pyspark or requests missing
        print(
            f"zaqar-delay-pipeline: {exc}; install with pip install 'zaqar-delay[spark]'",
            file=sys.stderr,
        )
        return 2
    try:
        return schedule(args) if args.command == "schedule" else report(args)
    except (InputError, PostingFailed) as exc:
        print(f"zaqar-delay-pipeline: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
