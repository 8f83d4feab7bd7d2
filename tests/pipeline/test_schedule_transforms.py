"""The schedule job's DataFrame functions, row by row, on a local[1] session."""

from __future__ import annotations

import datetime
import pathlib

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from zaqar_delay.conf import Limits
from zaqar_delay.pipeline import schedule
from zaqar_delay.pipeline.rows import derived_dedup_id

NOW = 1_800_000_000_000  # 2027-01-15T08:00:00Z


def rows_of(df: object) -> list[tuple[object, ...]]:
    return [tuple(r) for r in df.collect()]  # type: ignore[attr-defined]


def test_csv_is_read_as_text_and_bad_lines_are_kept(
    spark: SparkSession, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "in.csv"
    path.write_text(
        "queue,body,delay,ttl\n"
        'reminders,"{""to"": ""ann""}",30,600\n'
        "reminders,42,,\n"
        "reminders,1,2,3,4,5\n"
    )
    df = schedule.read_input(spark, str(path), schedule.input_format(str(path)))
    assert df.schema == schedule.RAW_SCHEMA
    assert rows_of(df) == [
        ("reminders", '{"to": "ann"}', "30", None, "600", None, None, None),
        ("reminders", "42", None, None, None, None, None, None),
        ("reminders", "1", "2", None, "3", None, "reminders,1,2,3,4,5", "Malformed CSV line."),
    ]


def test_csv_header_must_name_known_columns(spark: SparkSession, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("queue,payload\nq,1\n")
    with pytest.raises(schedule.InputError, match=r"missing \['body'\], unknown \['payload'\]"):
        schedule.read_input(spark, str(path), "csv")


def test_json_lines_keep_body_types_and_refuse_odd_lines(
    spark: SparkSession, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(
        '{"queue": "q", "body": {"a": [1, 2]}, "deliver_at": 1800000060000}\n'
        '{"queue": "q", "body": "text", "delay": 5, "dedup_id": "k"}\n'
        "\n"
        '{"queue": "q", "body": null, "ttl": 1.5}\n'
        "[1, 2]\n"
        '{"queue": "q", "body": 1, "colour": "red"}\n'
    )
    df = schedule.read_input(spark, str(path), schedule.input_format(str(path)))
    assert rows_of(df) == [
        ("q", '{"a":[1,2]}', None, "1800000060000", None, None, None, None),
        ("q", '"text"', "5", None, None, "k", None, None),
        ("q", "null", None, None, "1.5", None, None, None),
        (None,) * 6 + ("[1, 2]", "Line is not a JSON object."),
        (None,) * 6 + ('{"queue": "q", "body": 1, "colour": "red"}', "Unknown fields: colour."),
    ]


def test_parquet_keeps_types_as_text_and_timestamps_as_epoch_ms(
    spark: SparkSession, tmp_path: pathlib.Path
) -> None:
    schema = T.StructType(
        [
            T.StructField("queue", T.StringType()),
            T.StructField("body", T.StringType()),
            T.StructField("deliver_at", T.TimestampType()),
            T.StructField("ttl", T.IntegerType()),
        ]
    )
    at = datetime.datetime(2027, 1, 15, 8, 1, 0, 250000, tzinfo=datetime.UTC)
    spark.createDataFrame([("q", "[1]", at, 120), ("q", "2", None, None)], schema).write.parquet(
        str(tmp_path / "in.parquet")
    )
    df = schedule.read_input(spark, str(tmp_path / "in.parquet"), "parquet")
    assert rows_of(df) == [
        ("q", "[1]", None, "1800000060250", "120", None, None, None),
        ("q", "2", None, None, None, None, None, None),
    ]


def test_check_rows_gives_each_row_a_reason_or_a_message(spark: SparkSession) -> None:
    raw = spark.createDataFrame(
        [
            ("q", '{"a":1}', "30", None, "600", None, None, None),
            ("q", "1", None, "1800000060000", None, "mine", None, None),
            ("q", "1", "1000", None, None, None, None, None),
            (None, None, None, None, None, None, "[1]", "Line is not a JSON object."),
        ],
        schedule.RAW_SCHEMA,
    )
    checked = schedule.check_rows(raw, "p", Limits(), NOW)
    derived = derived_dedup_id(
        "p", dict(zip(schedule.rows.RAW_COLUMNS, ("q", '{"a":1}', "30", None, "600"), strict=False))
    )
    assert rows_of(checked) == [
        (
            *("q", '{"a":1}', "30", None, "600", None, None, None),
            f'{{"body":{{"a":1}},"ttl":600,"dedup_id":"{derived}"}}',
            30_000,
            None,
            derived,
        ),
        (
            *("q", "1", None, "1800000060000", None, "mine", None, None),
            '{"body":1,"ttl":3600,"dedup_id":"mine"}',
            None,
            NOW + 60_000,
            "mine",
        ),
        (
            *("q", "1", "1000", None, None, None, None),
            "The Delay TTL for a message may not exceed 900 seconds,and must be at least 0 "
            "seconds long.",
            None,
            None,
            None,
            None,
        ),
        (*(None,) * 6, "[1]", "Line is not a JSON object.", None, None, None, None),
    ]


def test_the_format_comes_from_the_name_or_the_option() -> None:
    assert schedule.input_format("x/data.CSV") == "csv"
    assert schedule.input_format("x/part-dir.parquet/") == "parquet"
    assert schedule.input_format("x/data.txt", "jsonl") == "jsonl"
    with pytest.raises(schedule.InputError):
        schedule.input_format("x/data.txt")
