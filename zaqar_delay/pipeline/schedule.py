"""``schedule``: post the rows of a dataset as delayed messages.

The steps are DataFrame-to-DataFrame functions: :func:`read_input` (CSV, JSON lines or
Parquet into text columns, explicit schema), :func:`check_rows` (the API's rules on every row,
a reason for each refused one), :func:`post_rows` (the executors post the valid rows and
report each row's outcome). :func:`run` ties them together, writes the rejects and counts.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Iterator
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from zaqar_delay import errors, jsondoc
from zaqar_delay.conf import Limits
from zaqar_delay.pipeline import rows
from zaqar_delay.pipeline.client import Poster, Target, batches

FORMATS = ("csv", "jsonl", "parquet")
EXTENSIONS = {
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
}

# The input, whatever its format: every column as text; ``source`` keeps a line that could
# not be read as a row, ``reason`` says why a row is refused (None while it is not).
RAW_SCHEMA = T.StructType(
    [T.StructField(c, T.StringType()) for c in rows.RAW_COLUMNS]
    + [T.StructField("source", T.StringType()), T.StructField("reason", T.StringType())]
)
CHECKED_SCHEMA = T.StructType(
    [
        *RAW_SCHEMA.fields,
        T.StructField("message_json", T.StringType()),
        T.StructField("delay_ms", T.LongType()),
        T.StructField("deliver_at_ms", T.LongType()),
        T.StructField("dedup_id_used", T.StringType()),
    ]
)
RESULT_SCHEMA = T.StructType(
    [
        *RAW_SCHEMA.fields,
        T.StructField("dedup_id_used", T.StringType()),
        T.StructField("status", T.StringType()),
        T.StructField("message_id", T.StringType()),
    ]
)
REJECT_COLUMNS = [*rows.RAW_COLUMNS, "source", "reason"]


class InputError(ValueError):
    """The input cannot be read as rows at all (a missing column, an unknown format)."""


# -- reading -----------------------------------------------------------------------------------


def input_format(path: str, given: str | None = None) -> str:
    """``given``, else the format the path's extension names."""
    if given:
        if given not in FORMATS:
            raise InputError(f"--format must be one of {', '.join(FORMATS)}, not {given!r}")
        return given
    found = EXTENSIONS.get(os.path.splitext(path.rstrip("/"))[1].lower())
    if found is None:
        raise InputError(f"cannot tell the format of {path}: name it with --format")
    return found


def _check_columns(columns: Iterable[str], path: str) -> list[str]:
    columns = list(columns)
    missing = [c for c in rows.REQUIRED_COLUMNS if c not in columns]
    unknown = [c for c in columns if c not in rows.RAW_COLUMNS]
    if missing or unknown:
        raise InputError(
            f"{path}: columns must be {', '.join(rows.RAW_COLUMNS)} (queue and body required);"
            f" missing {missing or 'none'}, unknown {unknown or 'none'}"
        )
    return columns


def _as_raw(df: DataFrame, present: list[str]) -> DataFrame:
    """Select the raw columns (absent ones null) and the source/reason columns."""
    selected = [
        F.col(c).cast("string").alias(c) if c in present else F.lit(None).cast("string").alias(c)
        for c in rows.RAW_COLUMNS
    ]
    extra = [c for c in ("source", "reason") if c in df.columns]
    nulls = [F.lit(None).cast("string").alias(c) for c in ("source", "reason") if c not in extra]
    return df.select(*selected, *[F.col(c) for c in extra], *nulls)


def read_csv(spark: SparkSession, path: str) -> DataFrame:
    """CSV with a header line; every column is read as text, and a line that does not fit
    the header becomes a refused row that keeps the line."""
    first = spark.read.text(path).limit(1).collect()
    if not first:
        return spark.createDataFrame([], RAW_SCHEMA)
    header = [c.strip().strip('"') for c in first[0][0].split(",")]
    present = _check_columns(header, path)
    schema = T.StructType(
        [T.StructField(c, T.StringType()) for c in present]
        + [T.StructField("_corrupt", T.StringType())]
    )
    df = (
        spark.read.schema(schema)
        .option("header", True)
        .option("escape", '"')  # RFC 4180: a quote inside a quoted field is doubled
        .option("enforceSchema", False)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", "_corrupt")
        .csv(path)
    )
    df = df.withColumn("source", F.col("_corrupt")).withColumn(
        "reason",
        F.when(F.col("_corrupt").isNotNull(), F.lit("Malformed CSV line.")),
    )
    return _as_raw(df, present)


def parse_json_line(line: str) -> tuple[str | None, ...]:
    """One JSON-lines row as raw text columns: ``body`` as JSON text whatever its type,
    numbers as their text; a line that is not a JSON object becomes a refused row."""
    try:
        document = jsondoc.loads(line.encode())
    except errors.ZaqarDelayError:  # the API's "could not be parsed"
        document = None
    if not isinstance(document, dict):
        return (*[None] * len(rows.RAW_COLUMNS), line, "Line is not a JSON object.")
    unknown = sorted(set(document) - set(rows.RAW_COLUMNS))
    if unknown:
        return (*[None] * len(rows.RAW_COLUMNS), line, f"Unknown fields: {', '.join(unknown)}.")

    def text(column: str) -> str | None:
        value = document.get(column)
        if column == "body":  # any JSON value, null included
            return jsondoc.dumps(value) if column in document else None
        if value is None or isinstance(value, str):
            return value
        return json.dumps(value)

    return (*map(text, rows.RAW_COLUMNS), None, None)


def read_jsonl(spark: SparkSession, path: str) -> DataFrame:
    lines = spark.read.text(path).filter(F.trim(F.col("value")) != "")
    parsed = lines.rdd.map(lambda row: parse_json_line(row[0]))
    return spark.createDataFrame(parsed, RAW_SCHEMA, verifySchema=False)


def read_parquet(spark: SparkSession, path: str) -> DataFrame:
    """Parquet keeps its own types: numbers become their text, a timestamp ``deliver_at``
    becomes epoch milliseconds, and ``body`` must be a string column of JSON text."""
    df = spark.read.parquet(path)
    present = _check_columns(df.columns, path)
    types = {f.name: f.dataType for f in df.schema.fields}
    if not isinstance(types["body"], T.StringType):
        raise InputError(f"{path}: body must be a string column of JSON text")
    if isinstance(types.get("deliver_at"), T.TimestampType | T.TimestampNTZType):
        df = df.withColumn("deliver_at", F.expr("CAST(unix_millis(deliver_at) AS STRING)"))
    return _as_raw(df, present)


def read_input(spark: SparkSession, path: str, fmt: str) -> DataFrame:
    """The input as RAW_SCHEMA rows."""
    readers = {"csv": read_csv, "jsonl": read_jsonl, "parquet": read_parquet}
    return readers[fmt](spark, path)


# -- checking ----------------------------------------------------------------------------------


def check_rows(raw: DataFrame, project: str, limits: Limits, now_ms: int) -> DataFrame:
    """CHECKED_SCHEMA: each row with its reason to be refused, or what to post for it."""

    def check(partition: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
        for row in partition:
            values = row.asDict()
            head = tuple(values[f.name] for f in RAW_SCHEMA.fields)
            if values["reason"] is not None:
                yield (*head, None, None, None, None)
                continue
            prepared = rows.prepare(values, project, limits, now_ms)
            if isinstance(prepared, str):
                yield (*head[:-1], prepared, None, None, None, None)
            else:
                yield (
                    *head,
                    prepared.message_json,
                    prepared.delay_ms,
                    prepared.deliver_at_ms,
                    prepared.dedup_id,
                )

    return raw.sparkSession.createDataFrame(
        raw.rdd.mapPartitions(check), CHECKED_SCHEMA, verifySchema=False
    )


# -- posting -----------------------------------------------------------------------------------


def post_rows(
    checked: DataFrame, target: Target, partitions: int, retries: Any = None
) -> DataFrame:
    """RESULT_SCHEMA: the valid rows posted from the executors, each with its outcome.

    Rows are spread over ``partitions`` by dedup id (the same rows land in the same task
    when Spark retries one) and sorted by queue within each, so posts hold many messages.
    ``retries``, a Spark accumulator, counts posts sent again.
    """
    valid = checked.filter(F.col("reason").isNull())
    spread = valid.repartition(partitions, "dedup_id_used").sortWithinPartitions("queue")

    def prepared(row: Any) -> rows.Prepared:
        return rows.Prepared(
            row["queue"],
            row["message_json"],
            row["delay_ms"],
            row["deliver_at_ms"],
            row["dedup_id_used"],
        )

    def post(partition: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
        poster = Poster(target)
        try:
            for batch in batches(partition, target.max_bytes, target.max_messages, prepared):
                outcomes = poster.post([prepared(row) for row in batch])
                for row, outcome in zip(batch, outcomes, strict=True):
                    head = [row[f.name] for f in RAW_SCHEMA.fields]
                    head[-1] = outcome.reason
                    yield (*head, row["dedup_id_used"], outcome.status, outcome.message_id)
        finally:
            if retries is not None:
                retries.add(poster.retries)
            poster.close()

    return checked.sparkSession.createDataFrame(
        spread.rdd.mapPartitions(post), RESULT_SCHEMA, verifySchema=False
    )


# -- the job -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Summary:
    """What became of the rows of one run: ``rows_read`` = scheduled + duplicates skipped +
    rejected."""

    rows_read: int
    scheduled: int
    duplicates_skipped: int
    rejected: int
    retried_posts: int
    rejects_path: str

    def lines(self) -> list[str]:
        return [
            f"rows read:          {self.rows_read}",
            f"scheduled:          {self.scheduled}",
            f"duplicates skipped: {self.duplicates_skipped}",
            f"rejected:           {self.rejected}  (rows and reasons in {self.rejects_path})",
            f"posts retried:      {self.retried_posts}",
        ]


def run(
    spark: SparkSession,
    input_path: str,
    target: Target,
    rejects_path: str,
    *,
    fmt: str | None = None,
    limits: Limits | None = None,
    now_ms: int,
    partitions: int | None = None,
) -> Summary:
    """Read, check, post; write every refused row with its reason to ``rejects_path``
    (JSON lines, replaced if it exists) and count what became of the rows."""
    limits = limits or Limits()
    target = dataclasses.replace(target, max_bytes=limits.max_messages_post_size)
    partitions = partitions or spark.sparkContext.defaultParallelism * 2
    raw = read_input(spark, input_path, input_format(input_path, fmt))
    if raw.rdd.getNumPartitions() < partitions:
        raw = raw.repartition(partitions)  # one large file is one split: check it on every core
    checked = check_rows(raw, target.project, limits, now_ms).persist()
    retries = spark.sparkContext.accumulator(0)
    results = post_rows(checked, target, partitions, retries).persist()
    try:
        statuses = {r["status"]: r["count"] for r in results.groupBy("status").count().collect()}
        refused = checked.filter(F.col("reason").isNotNull()).select(*REJECT_COLUMNS)
        refused_by_server = results.filter(F.col("status") == "rejected").select(*REJECT_COLUMNS)
        rejects = refused.unionByName(refused_by_server)
        rejects.coalesce(1).write.mode("overwrite").json(rejects_path)
        return Summary(
            rows_read=checked.count(),
            scheduled=statuses.get("scheduled", 0),
            duplicates_skipped=statuses.get("duplicate", 0),
            rejected=refused.count() + statuses.get("rejected", 0),
            retried_posts=int(retries.value),
            rejects_path=rejects_path,
        )
    finally:
        results.unpersist()
        checked.unpersist()
