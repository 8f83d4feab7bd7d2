"""The report job's DataFrame functions on a hand-written journal, on a local[1] session."""

from __future__ import annotations

import datetime
import json
import pathlib
from typing import Any

import pytest
from pyspark.sql import SparkSession

from zaqar_delay.pipeline import report

T0 = 1_800_000_000_000  # 2027-01-15T08:00:00Z, a whole minute
MINUTE0 = datetime.datetime(2027, 1, 15, 8, 0)


def event(ts: int, kind: str, message: str, queue: str = "q1", **fields: Any) -> str:
    return json.dumps(
        {"ts": T0 + ts, "event": kind, "project": "p", "queue": queue, "message_id": message}
        | {k: (T0 + v if k in ("due", "slot") else v) for k, v in fields.items()}
    )


JOURNAL = [
    event(0, "posted", "m1", due=1000, ttl=60),
    event(0, "posted", "m2", due=2000, ttl=60),
    event(10, "posted", "m3", due=10, ttl=60),
    event(1010, "claimed", "m1", claim_id="c1", claim_count=1, due=1000),
    event(2050, "claimed", "m2", claim_id="c2", claim_count=1, due=2000),
    event(40, "claimed", "m3", claim_id="c3", claim_count=1, due=10),
    event(100, "rescheduled", "m3", claim_id="c3", due=120_000),
    event(200, "edited", "m2", claim_id=None, changed=["body"]),
    event(1500, "deleted", "m1", claim_id="c1"),
    event(3000, "released", "m2", claim_id="c2"),
    event(61_000, "claimed", "m2", claim_id="c4", claim_count=2, due=2000),
    event(62_000, "deleted", "m2", claim_id="c4"),
    event(120_005, "claimed", "m3", claim_id="c5", claim_count=2, due=120_000),
    event(130_000, "dead_lettered", "m3", dead_letter_queue="dead"),
    event(0, "posted", "m4", queue="q2", due=1000, ttl=60),
    event(500, "claimed", "m4", queue="q2", claim_id=None, claim_count=1, due=1000),
    '{"ts": 1, "event": "posted", "proj',
]
# project, queue, posted, claimed, deleted, redelivered, released, rescheduled, edited,
# dead_lettered,
# delivered_before_due, first_deliveries, p50, p95, p99, max
Q1_MINUTE0 = (3, 3, 1, 0, 1, 1, 1, 0, 0, 3, 30.0, 48.0, 49.6, 50)
# pushed, delivered, retries, failures, before due, push lateness p50, p95, p99, max
NO_PUSHES = (0, 0, 0, 0, 0, None, None, None, None)


@pytest.fixture
def journal(spark: SparkSession, tmp_path: pathlib.Path) -> Any:
    directory = tmp_path / "journal"
    directory.mkdir()
    (directory / "journal-a.jsonl").write_text("\n".join(JOURNAL[:8]) + "\n")
    (directory / "journal-b.jsonl").write_text("\n".join(JOURNAL[8:]) + "\n")
    return report.read_journal(spark, str(directory))


def test_per_minute_counts_and_lateness(journal: Any) -> None:
    rows = [tuple(r) for r in report.per_minute(journal).collect()]
    minute = datetime.timedelta(minutes=1)
    assert rows == [
        ("p", "q1", MINUTE0, *Q1_MINUTE0, *NO_PUSHES),
        (
            "p",
            "q1",
            MINUTE0 + minute,
            0,
            1,
            1,
            1,
            0,
            0,
            0,
            0,
            0,
            0,
            None,
            None,
            None,
            None,
            *NO_PUSHES,
        ),
        (
            "p",
            "q1",
            MINUTE0 + 2 * minute,
            0,
            1,
            0,
            1,
            0,
            0,
            0,
            1,
            0,
            0,
            None,
            None,
            None,
            None,
            *NO_PUSHES,
        ),
        (
            *("p", "q2", MINUTE0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1),
            *(-500.0, -500.0, -500.0, -500),
            *NO_PUSHES,
        ),
    ]


def test_per_queue_and_summary(journal: Any) -> None:
    queues = report.per_queue(journal)
    rows = [tuple(r) for r in queues.collect()]
    assert rows == [
        (
            *("p", "q1", MINUTE0, MINUTE0 + datetime.timedelta(seconds=130)),
            *(3, 5, 2, 2, 1, 1, 1, 1, 0, 3, 30.0, 48.0, 49.6, 50),
            *NO_PUSHES,
        ),
        (
            *("p", "q2", MINUTE0, MINUTE0 + datetime.timedelta(milliseconds=500)),
            *(1, 1, 0, 0, 0, 0, 0, 0, 1, 1, -500.0, -500.0, -500.0, -500),
            *NO_PUSHES,
        ),
    ]
    result = report.summary(journal, queues)
    assert result["events"] == 16
    assert result["unreadable_lines"] == 1
    assert result["deliveries_before_due"] == 1
    assert result["totals"]["redelivered"] == 2
    assert result["queues"][0]["first_event"] == "2027-01-15T08:00:00.000Z"
    assert result["queues"][1]["lateness_p99_ms"] == -500.0


def test_lateness_distribution_bins_first_deliveries(journal: Any) -> None:
    rows = [tuple(r) for r in report.lateness_distribution(journal).collect()]
    # q1's first deliveries were 10, 50 and 30 ms late (bins up to 10 and up to 50 ms), q2's
    # one was early (the first bin); redeliveries are not counted.
    assert rows == [("p", "q1", 3, 1), ("p", "q1", 5, 2), ("p", "q2", 0, 1)]


def test_run_writes_tables_summary_and_chart(
    spark: SparkSession, journal: Any, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "out"
    result = report.run(spark, str(tmp_path / "journal"), str(out))
    assert json.loads((out / "summary.json").read_text()) == result
    minutes = spark.read.parquet(str(out / "per_minute"))
    assert minutes.count() == 4
    assert spark.read.parquet(str(out / "per_queue")).count() == 2
    png = (out / "lateness.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000


def test_pushes_are_counted_by_outcome_with_their_lateness(
    spark: SparkSession, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "pushes.jsonl"
    pushed = "pushed"
    path.write_text(
        "\n".join(
            [
                event(0, "posted", "m1", due=1000, ttl=60),
                event(0, "posted", "m2", due=0, ttl=60),
                event(
                    1020, pushed, "m1", subscription_id="s", attempt=1, outcome="retry", due=1000
                ),
                event(
                    1030,
                    pushed,
                    "m1",
                    subscription_id="s",
                    attempt=2,
                    outcome="delivered",
                    due=1000,
                ),
                event(
                    10,
                    pushed,
                    "m2",
                    subscription_id="s",
                    attempt=1,
                    outcome="failed",
                    due=0,
                    error="HTTP 404",
                ),
            ]
        )
        + "\n"
    )
    events = report.read_journal(spark, str(path))
    [row] = report.per_queue(events).collect()
    assert tuple(row)[-9:] == (3, 1, 1, 1, 0, 15.0, 19.5, 19.9, 20)
    result = report.summary(events, report.per_queue(events))
    assert result["events"] == 5 and result["pushes_before_due"] == 0
    assert result["totals"]["push_failures"] == 1


def test_topic_deliveries_are_counted_apart_from_queues(
    spark: SparkSession, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "topics.jsonl"
    lines = [event(0, "posted", "m1", queue="~alerts", due=1000, ttl=60)]
    for subscription, outcome in (("s1", "delivered"), ("s2", "retry"), ("s2", "delivered")):
        lines.append(
            event(
                1010,
                "pushed",
                "m1",
                queue="~alerts",
                subscription_id=subscription,
                attempt=1 if outcome == "retry" or subscription == "s1" else 2,
                outcome=outcome,
                due=1000,
            )
        )
    lines.append(event(0, "posted", "m2", queue="alerts", due=0, ttl=60))
    lines.append(
        event(
            5,
            "pushed",
            "m2",
            queue="alerts",
            subscription_id="s3",
            attempt=1,
            outcome="delivered",
            due=0,
        )
    )
    path.write_text("\n".join(lines) + "\n")
    events = report.read_journal(spark, str(path))
    result = report.summary(events, report.per_queue(events))
    assert result["topics"] == 1
    assert result["topic_deliveries"] == 2
    assert result["totals"]["pushes_delivered"] == 3


def test_schedule_fires_are_counted_per_schedule_with_their_lateness(
    spark: SparkSession, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "schedules.jsonl"
    lines = [
        event(0, "scheduled", "m1", schedule="nightly", slot=1000, due=1000),
        event(0, "scheduled", "m2", schedule="nightly", slot=2000, due=2000),
        event(0, "scheduled", "m3", schedule="nightly", slot=3000, due=3400),  # late
        event(0, "scheduled", "m4", schedule="hourly", slot=1000, due=1000),
        # Due its delay (30 s) after its slot: on time.
        event(0, "scheduled", "m5", schedule="hourly", slot=2000, due=32000, delay=30000),
        # A schedule's ticks live in a queue of the server's own: not counted anywhere.
        event(0, "pushed", "t1", queue="~~q1~", subscription_id="s", attempt=1,
              outcome="delivered", due=0),
    ]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    events = report.read_journal(spark, str(path))
    rows = [tuple(r) for r in report.per_schedule(events).collect()]
    assert rows == [
        ("p", "q1", "hourly", 2, 0, 0.0, 0.0, 0.0, 0),
        ("p", "q1", "nightly", 3, 1, 0.0, pytest.approx(360.0), pytest.approx(392.0), 400),
    ]
    result = report.summary(events, report.per_queue(events))
    assert [q["queue"] for q in result["queues"]] == ["q1"]
    assert result["totals"]["pushed"] == 0
    assert [s["schedule"] for s in result["schedules"]] == ["hourly", "nightly"]


def test_a_message_whose_lines_were_written_again_counts_once(
    spark: SparkSession, tmp_path: pathlib.Path
) -> None:
    """Repeats (a post retried with its dedup ids, a schedule's fire made again, a delete of
    a message already gone) count once per message, in the minute of the line written when it was stored, or of the first
    repeat when that line is missing (the first attempt's answer was lost); a fire known only
    by repeats counts without a lateness, which only the first attempt knew."""
    path = tmp_path / "repeats.jsonl"
    lines = [
        event(0, "posted", "m1", due=0, ttl=60),
        event(61_000, "posted", "m1", repeat=True),  # a retry after the answer arrived
        event(70_000, "posted", "m2", repeat=True),  # the only lines of m2: a lost answer
        event(130_000, "posted", "m2", repeat=True),
        event(0, "posted", "m3", queue="q2", due=0, ttl=60),  # another queue's m3
        event(61_000, "posted", "m3", repeat=True),
        event(0, "scheduled", "f1", schedule="s", slot=1000, due=1400, delay=0),  # late
        event(60_000, "scheduled", "f1", schedule="s", slot=1000, delay=0, repeat=True),
        event(60_000, "scheduled", "f2", schedule="s", slot=61_000, delay=0, repeat=True),
        event(60_000, "deleted", "m1", claim_id=None),
        event(125_000, "deleted", "m1", claim_id=None, repeat=True),  # a retried delete
        event(130_000, "deleted", "m2", claim_id=None, repeat=True),  # a lost answer's retry
        event(190_000, "deleted", "m2", claim_id=None, repeat=True),
    ]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    events = report.read_journal(spark, str(path))
    minutes = report.per_minute(events).select("queue", "minute", "posted", "deleted")
    minute = datetime.timedelta(minutes=1)
    assert [tuple(r) for r in minutes.collect()] == [
        ("q1", MINUTE0, 1, 0),
        ("q1", MINUTE0 + minute, 2, 1),  # m3's repeat (q1) and m2's first
        ("q1", MINUTE0 + 2 * minute, 0, 1),  # m2's delete, its first repeat
        ("q2", MINUTE0, 1, 0),
    ]
    rows = [tuple(r) for r in report.per_schedule(events).collect()]
    assert rows == [("p", "q1", "s", 2, 1, 400.0, 400.0, 400.0, 400)]
    result = report.summary(events, report.per_queue(events))
    assert result["totals"]["posted"] == 4
    assert result["totals"]["deleted"] == 2
    assert result["events"] == 6
