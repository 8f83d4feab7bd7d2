"""The pipeline's per-row logic and its batching, without Spark."""

from __future__ import annotations

import json

import pytest

from zaqar_delay.conf import Limits
from zaqar_delay.pipeline.client import Outcome, batches, outcomes_of
from zaqar_delay.pipeline.rows import Prepared, derived_dedup_id, prepare

NOW = 1_800_000_000_000
LIMITS = Limits()


def raw(**values: str | None) -> dict[str, str | None]:
    row: dict[str, str | None] = dict.fromkeys(
        ("queue", "body", "delay", "deliver_at", "ttl", "dedup_id")
    )
    row.update(values)
    return row


def test_a_delay_row_becomes_a_message_due_that_long_after_its_post() -> None:
    prepared = prepare(raw(queue="q", body='{"a": 1}', delay="30", ttl="600"), "p", LIMITS, NOW)
    assert isinstance(prepared, Prepared)
    assert (prepared.queue, prepared.delay_ms, prepared.deliver_at_ms) == ("q", 30_000, None)
    sent = json.loads(prepared.document(NOW + 5))
    assert sent == {
        "body": {"a": 1},
        "ttl": 600,
        "dedup_id": prepared.dedup_id,
        "deliver_at": NOW + 30_005,
    }


def test_a_deliver_at_row_keeps_its_time_and_a_passed_time_means_now() -> None:
    prepared = prepare(
        raw(queue="q", body='"x"', deliver_at="2027-01-15T08:01:00Z", dedup_id="mine"),
        "p",
        LIMITS,
        NOW,
    )
    assert isinstance(prepared, Prepared)
    assert (prepared.deliver_at_ms, prepared.dedup_id) == (NOW + 60_000, "mine")
    assert json.loads(prepared.document(NOW))["deliver_at"] == NOW + 60_000
    assert json.loads(prepared.document(NOW + 90_000))["deliver_at"] == NOW + 90_000
    epoch = prepare(raw(queue="q", body="1", deliver_at=str(NOW + 1)), "p", LIMITS, NOW)
    assert isinstance(epoch, Prepared) and epoch.deliver_at_ms == NOW + 1


def test_a_row_without_time_is_due_at_once_with_the_default_ttl() -> None:
    prepared = prepare(raw(queue="q", body="null"), "p", LIMITS, NOW)
    assert isinstance(prepared, Prepared)
    assert prepared.delay_ms == 0
    assert json.loads(prepared.message_json)["ttl"] == LIMITS.default_message_ttl


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ({"body": "1"}, "Missing value of queue."),
        ({"queue": "q"}, "Missing value of body."),
        ({"queue": "bad name", "body": "1"}, "The format of the submitted queue name"),
        ({"queue": "q", "body": "{oops"}, "body is not JSON text"),
        ({"queue": "q", "body": "1", "delay": "soon"}, 'The value of the "delay" field must be'),
        ({"queue": "q", "body": "1", "delay": "1.5"}, 'The value of the "delay" field must be'),
        ({"queue": "q", "body": "1", "delay": "901"}, "The Delay TTL for a message may not"),
        ({"queue": "q", "body": "1", "delay": "-1"}, "The Delay TTL for a message may not"),
        ({"queue": "q", "body": "1", "ttl": "59"}, "The TTL for a message may not exceed"),
        ({"queue": "q", "body": "1", "delay": "5", "deliver_at": "1"}, "Give either delay"),
        ({"queue": "q", "body": "1", "deliver_at": "tomorrow"}, "is not an RFC 3339 time"),
        ({"queue": "q", "body": "1", "deliver_at": str(NOW - 6000)}, "seconds in the past"),
        ({"queue": "q", "body": "1", "dedup_id": "x" * 257}, "A dedup_id must be at least 1"),
        ({"queue": "q", "body": json.dumps("x" * 262_200)}, "Message collection size is too"),
    ],
)
def test_refused_rows_get_the_apis_reason(values: dict[str, str], reason: str) -> None:
    outcome = prepare(raw(**values), "p", LIMITS, NOW)
    assert isinstance(outcome, str) and reason in outcome


def test_derived_dedup_ids_follow_the_content_and_the_project() -> None:
    row = raw(queue="q", body='{"a":1}', delay="5")
    assert derived_dedup_id("p", row) == derived_dedup_id("p", dict(row))
    assert derived_dedup_id("p", row) != derived_dedup_id("p2", row)
    assert derived_dedup_id("p", row) != derived_dedup_id("p", {**row, "delay": "6"})
    assert derived_dedup_id("p", row).startswith("zdp-") and len(derived_dedup_id("p", row)) == 44


def prepared(queue: str, size: int = 10) -> Prepared:
    return Prepared(queue, '{"body":"' + "x" * size + '"}', 0, None, "d")


def test_batches_hold_one_queue_within_count_and_size() -> None:
    rows = [prepared("a"), prepared("a"), prepared("a"), prepared("b"), prepared("a")]
    assert [[r.queue for r in b] for b in batches(rows, 10_000, 2, lambda r: r)] == [
        ["a", "a"],
        ["a"],
        ["b"],
        ["a"],
    ]
    big = [prepared("a", 400) for _ in range(5)]
    sized = list(batches(big, 1000, 100, lambda r: r))
    assert [len(b) for b in sized] == [2, 2, 1]


def test_outcomes_tell_new_from_remembered_and_repeated() -> None:
    href = "/v2/queues/q/messages/"
    answer = {
        "resources": [href + "new", href + "old", href + "twice", href + "twice", href + "x"],
        "duplicates": [href + "old", href + "twice"],
    }
    assert outcomes_of(answer) == [
        Outcome("scheduled", "new"),
        Outcome("duplicate", "old"),
        Outcome("scheduled", "twice"),
        Outcome("duplicate", "twice"),
        Outcome("scheduled", "x"),
    ]
