"""``report``: delivery analytics from the lifecycle journal (:mod:`zaqar_delay.journal`).

:func:`read_journal` reads the JSON lines with an explicit schema; :func:`per_minute` and
:func:`per_queue` are pure DataFrame functions; :func:`run` writes them as Parquet with a
summary JSON and a lateness chart.

Definitions: a *delivery* is a ``claimed`` event (a claim or a pop); it is *redelivered* when
its claim count is above 1; *lateness* is a first delivery's time minus the due time the
message had then, in milliseconds; a delivery *before due* has a negative lateness, on any
delivery (there must be none). Per-minute rows bucket each event by its own minute (a
lateness by the minute of the first delivery).

Pushes to subscribers (``pushed`` events, one per attempt) are counted by outcome; *push
lateness* is a first attempt's time minus the message's due time, and a push *before due*
has a negative one (there must be none either).

A topic's rows carry its stored name (``~<topic>``, :mod:`zaqar_delay.topics`); the summary
counts topic deliveries (their pushes delivered) apart from the queues'. Recurring schedules'
fires (``scheduled`` events) are counted per schedule with their lateness (due time minus
slot and the message's delay) in the summary's ``schedules``; the events of the server's own
queues (``~~``, a schedule's ticks) are left out of every count.
"""

from __future__ import annotations

import json
import os
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from zaqar_delay import topics

JOURNAL_SCHEMA = T.StructType(
    [
        T.StructField("ts", T.LongType()),
        T.StructField("event", T.StringType()),
        T.StructField("project", T.StringType()),
        T.StructField("queue", T.StringType()),
        T.StructField("message_id", T.StringType()),
        T.StructField("claim_id", T.StringType()),
        T.StructField("claim_count", T.LongType()),
        T.StructField("due", T.LongType()),
        T.StructField("ttl", T.LongType()),
        T.StructField("dead_letter_queue", T.StringType()),
        T.StructField("subscription_id", T.StringType()),
        T.StructField("attempt", T.LongType()),
        T.StructField("outcome", T.StringType()),
        T.StructField("error", T.StringType()),
        T.StructField("schedule", T.StringType()),
        T.StructField("slot", T.LongType()),
        T.StructField("delay", T.LongType()),
        T.StructField("repeat", T.BooleanType()),
        T.StructField("_corrupt", T.StringType()),
    ]
)
EVENTS = (
    "posted",
    "claimed",
    "deleted",
    "released",
    "rescheduled",
    "edited",
    "dead_lettered",
    "pushed",
)
#: Events a message has one of, whose lines the journal may write more than once.
AT_LEAST_ONCE = ("posted", "scheduled", "deleted")
PUSH_TOTALS = ("pushes_delivered", "push_retries", "push_failures", "pushed_before_due")
PERCENTILES = (0.5, 0.95, 0.99)


def read_lines(spark: SparkSession, path: str) -> DataFrame:
    """Every journal line under ``path`` (a file or a directory of ``*.jsonl``); a line that
    cannot be read keeps its text in ``_corrupt`` (a worker killed mid-write leaves one)."""
    reader = (
        spark.read.schema(JOURNAL_SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", "_corrupt")
    )
    if os.path.isdir(path):
        reader = reader.option("pathGlobFilter", "*.jsonl")
    return reader.json(path)


def read_journal(spark: SparkSession, path: str) -> DataFrame:
    """The journal's events under ``path``: its lines (:func:`read_lines`), with each message's
    ``posted``, ``scheduled`` and ``deleted`` lines once (:func:`once_per_message`)."""
    return once_per_message(read_lines(spark, path))


def once_per_message(lines: DataFrame) -> DataFrame:
    """``lines`` with one line of each :data:`AT_LEAST_ONCE` event per message (project,
    queue and message id): the line written when the message was stored (or deleted), else
    the first repeat. The journal writes these lines at least once (a post retried with its
    dedup ids, or a delete of a message already gone, writes repeats, whether the first
    attempt's answer was lost or not: see :mod:`zaqar_delay.journal`), so counting lines
    would count some messages twice. A store stores (and removes) a message once, so only
    the repeats are compared with other lines: the few repeats against the keys of the lines
    that are not, and only when there are repeats (one pass over ``lines`` to know: cache
    them when they are read again afterwards)."""
    keys = ["project", "queue", "event", "message_id"]
    kind = F.col("event").isin(*AT_LEAST_ONCE)
    repeat = F.coalesce(kind & F.col("repeat"), F.lit(False))
    if lines.filter(repeat).isEmpty():  # the usual journal: nothing to compare
        return lines
    stored = lines.filter(kind & ~repeat).select(*keys)
    lone = lines.filter(repeat).join(stored, keys, "left_anti")
    first = F.row_number().over(Window.partitionBy(*keys).orderBy("ts"))
    lone = lone.withColumn("_first", first).filter(F.col("_first") == 1).drop("_first")
    # Computed here, once, rather than by each table read from the result (the comparison
    # reads every stored line's key); what it keeps is small: messages whose line was lost.
    return lines.filter(~repeat).unionByName(lone.localCheckpoint())


def _count(condition: Column) -> Column:
    return F.count(F.when(condition, True))


def _measures() -> list[Column]:
    event = F.col("event")
    claimed = event == "claimed"
    lateness = F.when(claimed & (F.col("claim_count") == 1), F.col("ts") - F.col("due"))
    quantiles = F.percentile(lateness, list(PERCENTILES))
    pushed = event == "pushed"
    push_lateness = F.when(pushed & (F.col("attempt") == 1), F.col("ts") - F.col("due"))
    return [
        _count(event == "posted").alias("posted"),
        _count(claimed).alias("claimed"),
        _count(event == "deleted").alias("deleted"),
        _count(claimed & (F.col("claim_count") > 1)).alias("redelivered"),
        _count(event == "released").alias("released"),
        _count(event == "rescheduled").alias("rescheduled"),
        _count(event == "edited").alias("edited"),
        _count(event == "dead_lettered").alias("dead_lettered"),
        _count(claimed & (F.col("ts") < F.col("due"))).alias("delivered_before_due"),
        _count(lateness.isNotNull()).alias("first_deliveries"),
        quantiles.alias("_quantiles"),
        F.max(lateness).alias("lateness_max_ms"),
        _count(pushed).alias("pushed"),
        _count(pushed & (F.col("outcome") == "delivered")).alias("pushes_delivered"),
        _count(pushed & (F.col("outcome") == "retry")).alias("push_retries"),
        _count(pushed & (F.col("outcome") == "failed")).alias("push_failures"),
        _count(pushed & (F.col("ts") < F.col("due"))).alias("pushed_before_due"),
        F.percentile(push_lateness, list(PERCENTILES)).alias("_push_quantiles"),
        F.max(push_lateness).alias("push_lateness_max_ms"),
    ]


def _spread_quantiles(df: DataFrame) -> DataFrame:
    """The claim measures, claim lateness, the push counts, then push lateness."""

    def spread(prefix: str) -> list[Column]:
        return [
            F.col(f"_{prefix}quantiles")[i].alias(f"{prefix}lateness_p{round(q * 100)}_ms")
            for i, q in enumerate(PERCENTILES)
        ]

    push_counts = ["pushed", *PUSH_TOTALS]
    latenesses = ("_quantiles", "lateness_max_ms", "_push_quantiles", "push_lateness_max_ms")
    others = [c for c in df.columns if c not in (*latenesses, *push_counts)]
    return df.select(
        *others,
        *spread(""),
        "lateness_max_ms",
        *push_counts,
        *spread("push_"),
        "push_lateness_max_ms",
    )


def readable(events: DataFrame) -> DataFrame:
    """The lines that were read, but the server's own queues' (a schedule's ticks)."""
    return events.filter(
        F.col("_corrupt").isNull()
        & F.col("event").isNotNull()
        & ~F.coalesce(F.col("queue"), F.lit("")).startswith(topics.INTERNAL)
    )


def per_schedule(events: DataFrame) -> DataFrame:
    """One row per (project, queue, schedule) that fired (``scheduled`` events): fires,
    fires due after their slot plus their message's delay (``late_fires``), and lateness (due
    time minus slot and delay, ms: 0 for a fire made ahead of its slot; a line without
    ``delay``, written before delays were journaled, counts a delay of 0)."""
    fires = readable(events).filter(F.col("event") == "scheduled")
    lateness = F.col("due") - F.col("slot") - F.coalesce(F.col("delay"), F.lit(0))
    return (
        fires.groupBy("project", "queue", "schedule")
        .agg(
            F.count(F.lit(1)).alias("fires"),
            _count(lateness > 0).alias("late_fires"),
            *(
                F.percentile(lateness, q).alias(f"lateness_p{round(q * 100)}_ms")
                for q in PERCENTILES
            ),
            F.max(lateness).alias("lateness_max_ms"),
        )
        .orderBy("project", "queue", "schedule")
    )


def per_minute(events: DataFrame) -> DataFrame:
    """One row per (project, queue, minute) with events: counts and lateness in ms."""
    minute = F.timestamp_millis(F.floor(F.col("ts") / 60000) * 60000).alias("minute")
    grouped = readable(events).groupBy("project", "queue", minute).agg(*_measures())
    return _spread_quantiles(grouped).orderBy("project", "queue", "minute")


def per_queue(events: DataFrame) -> DataFrame:
    """One row per (project, queue) over the whole journal, with its first and last event."""
    grouped = (
        readable(events)
        .groupBy("project", "queue")
        .agg(
            F.timestamp_millis(F.min("ts")).alias("first_event"),
            F.timestamp_millis(F.max("ts")).alias("last_event"),
            *_measures(),
        )
    )
    return _spread_quantiles(grouped).orderBy("project", "queue")


def lateness_distribution(events: DataFrame) -> DataFrame:
    """First deliveries per (project, queue, lateness bin): bin ``i`` holds lateness up to
    ``chart.LATENESS_BINS_MS[i]`` ms and above the edge before it (bin 0 from nothing up, so
    early deliveries too), the last bin everything above the last edge."""
    from zaqar_delay.pipeline.chart import LATENESS_BINS_MS

    first = readable(events).filter((F.col("event") == "claimed") & (F.col("claim_count") == 1))
    lateness = F.col("ts") - F.col("due")
    bin_index = sum(
        (F.when(lateness > edge, 1).otherwise(0) for edge in LATENESS_BINS_MS), F.lit(0)
    )
    return (
        first.filter(F.col("due").isNotNull())
        .groupBy("project", "queue", bin_index.alias("bin"))
        .agg(F.count(F.lit(1)).alias("deliveries"))
        .orderBy("project", "queue", "bin")
    )


def summary(events: DataFrame, queues: DataFrame) -> dict[str, Any]:
    """Totals over every queue, the rows of ``per_queue`` (times in RFC 3339, UTC when the
    session time zone is UTC, as the command sets it), and how many lines were unreadable."""
    rfc3339 = "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"
    as_text = [
        F.date_format(c, rfc3339).alias(c) if c in ("first_event", "last_event") else F.col(c)
        for c in queues.columns
    ]
    queue_rows = [r.asDict() for r in queues.select(*as_text).collect()]
    totals = {
        name: sum(int(q[name]) for q in queue_rows)
        for name in (
            *EVENTS,
            *PUSH_TOTALS,
            "redelivered",
            "delivered_before_due",
            "first_deliveries",
        )
    }
    unreadable = events.filter(F.col("_corrupt").isNotNull() | F.col("event").isNull()).count()
    topic_rows = [q for q in queue_rows if topics.is_topic(str(q["queue"]))]
    schedule_rows = [r.asDict() for r in per_schedule(events).collect()]
    return {
        "events": sum(totals[e] for e in EVENTS),
        "topics": len(topic_rows),
        "topic_deliveries": sum(int(q["pushes_delivered"]) for q in topic_rows),
        "unreadable_lines": unreadable,
        "deliveries_before_due": totals["delivered_before_due"],
        "pushes_before_due": totals["pushed_before_due"],
        "totals": totals,
        "queues": queue_rows,
        "schedules": schedule_rows,
    }


def run(spark: SparkSession, journal_path: str, out_dir: str) -> dict[str, Any]:
    """Write ``per_minute/`` and ``per_queue/`` (Parquet), ``summary.json`` and
    ``lateness.png`` under ``out_dir``; returns the summary."""
    from zaqar_delay.pipeline import chart

    os.makedirs(out_dir, exist_ok=True)
    lines = read_lines(spark, journal_path).cache()
    # Not cached itself: it filters the cached lines, and computes the repeats' comparison
    # once (once_per_message).
    events = once_per_message(lines)
    minutes = per_minute(events).cache()
    queues = per_queue(events).cache()  # written, then read again for the summary
    try:
        minutes.write.mode("overwrite").parquet(os.path.join(out_dir, "per_minute"))
        queues.write.mode("overwrite").parquet(os.path.join(out_dir, "per_queue"))
        result = summary(events, queues)
        result["journal"] = journal_path
        with open(os.path.join(out_dir, "summary.json"), "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
            handle.write("\n")
        chart.lateness_png(
            [r.asDict() for r in minutes.collect()],
            os.path.join(out_dir, "lateness.png"),
            [r.asDict() for r in lateness_distribution(events).collect()],
        )
        return result
    finally:
        for frame in (queues, minutes, lines):
            frame.unpersist()
