"""Schedule plans (``schedules/plan.py``): cron slots in IANA time zones through their
daylight-saving transitions, intervals, bounds and limits, misfire catch-up, and the 400s of
a plan that cannot be."""

from __future__ import annotations

import datetime
import itertools
import unittest.mock
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zaqar_delay import errors
from zaqar_delay.schedules import plan
from zaqar_delay.schedules.plan import MAX_CATCH_UP, Plan


def ms(text: str) -> int:
    moment = datetime.datetime.fromisoformat(text)
    return int(moment.timestamp() * 1000)


def utc(slots: list[int]) -> list[str]:
    return [
        datetime.datetime.fromtimestamp(s / 1000, datetime.UTC).strftime("%Y-%m-%dT%H:%MZ")
        for s in slots
    ]


def test_weekdays_at_nine_in_paris() -> None:
    weekdays = Plan(cron="0 9 * * 1-5", timezone="Europe/Paris")
    friday_noon = ms("2026-11-27T12:00:00+01:00")
    assert utc(weekdays.next_slots(friday_noon, 3)) == [
        "2026-11-30T08:00Z",  # Monday, CET
        "2026-12-01T08:00Z",
        "2026-12-02T08:00Z",
    ]


@pytest.mark.parametrize(
    ("zone", "cron", "after", "expected"),
    [
        # Spring forward: 02:30 does not exist; it fires once, at the first instant after.
        ("Europe/Paris", "30 2 * * *", "2026-03-28T12:00+01:00", ["2026-03-29T01:00Z", "2026-03-30T00:30Z"]),
        ("America/New_York", "30 2 * * *", "2026-03-07T12:00-05:00", ["2026-03-08T07:00Z", "2026-03-09T06:30Z"]),
        ("Australia/Sydney", "30 2 * * *", "2026-10-03T12:00+10:00", ["2026-10-03T16:00Z", "2026-10-04T15:30Z"]),
        # Fall back: 02:30 (01:30 in New York) exists twice; it fires once, the first time.
        ("Europe/Paris", "30 2 * * *", "2026-10-24T12:00+02:00", ["2026-10-25T00:30Z", "2026-10-26T01:30Z"]),
        ("America/New_York", "30 1 * * *", "2026-10-31T12:00-04:00", ["2026-11-01T05:30Z", "2026-11-02T06:30Z"]),
        ("Australia/Sydney", "30 2 * * *", "2026-04-04T12:00+11:00", ["2026-04-04T15:30Z", "2026-04-05T16:30Z"]),
        # No daylight saving: the same offset all year.
        ("Asia/Kolkata", "0 9 * * *", "2026-03-28T12:00+05:30", ["2026-03-29T03:30Z", "2026-03-30T03:30Z"]),
    ],
)  # fmt: skip
def test_daylight_saving_transitions_fire_each_slot_once(
    zone: str, cron: str, after: str, expected: list[str]
) -> None:
    assert utc(Plan(cron=cron, timezone=zone).next_slots(ms(after), 2)) == expected


def test_minutes_of_real_time_fire_through_the_repeated_hour() -> None:
    half_hourly = Plan(cron="*/30 * * * *", timezone="Europe/Paris")
    slots = half_hourly.next_slots(ms("2026-10-25T01:50+02:00"), 6)
    # 02:00, 02:30 CEST, then 02:00, 02:30 CET: an hour of real time between them.
    assert utc(slots) == [
        "2026-10-25T00:00Z",
        "2026-10-25T00:30Z",
        "2026-10-25T01:00Z",
        "2026-10-25T01:30Z",
        "2026-10-25T02:00Z",
        "2026-10-25T02:30Z",
    ]
    assert all(b - a == 1_800_000 for a, b in itertools.pairwise(slots))


def test_intervals_count_from_start_at_or_from_when_written() -> None:
    written = ms("2026-11-29T10:00:00+00:00")
    every_minute = Plan(every_s=60, anchor_ms=written)
    assert every_minute.next_slots(written, 2) == [written + 60_000, written + 120_000]
    assert every_minute.next_slots(written + 60_000, 1) == [written + 120_000]
    assert every_minute.next_slots(written + 59_999, 1) == [written + 60_000]
    start = written + 3_600_000
    from_start = Plan(every_s=60, start_at_ms=start, anchor_ms=start)
    assert from_start.next_slots(written, 2) == [start, start + 60_000]


def test_end_at_and_limit_bound_the_slots() -> None:
    start = ms("2026-11-29T10:00:00+00:00")
    bounded = Plan(every_s=10, start_at_ms=start, end_at_ms=start + 30_000, anchor_ms=start)
    assert bounded.next_slots(start - 1, 10) == [start + d for d in (0, 10_000, 20_000, 30_000)]
    limited = Plan(every_s=10, start_at_ms=start, limit=3, anchor_ms=start)
    assert len(limited.next_slots(start - 1, 10)) == 3
    assert limited.next_slots(start + 10_000, 10, fired=2) == [start + 20_000]
    assert limited.next_slots(start + 10_000, 10, fired=3) == []


def test_missed_slots_fire_by_the_misfire_policy() -> None:
    start = ms("2026-11-29T10:00:00+00:00")
    skip = Plan(every_s=60, start_at_ms=start, anchor_ms=start)
    outage_end = start + 10 * 60_000 + 5
    assert skip.missed(start, outage_end) == [start + 10 * 60_000]  # the latest, once
    every = Plan(every_s=60, start_at_ms=start, anchor_ms=start, misfire="all")
    assert every.missed(start, outage_end) == [start + k * 60_000 for k in range(1, 11)]
    long_outage = start + 1000 * 60_000
    caught_up = every.missed(start, long_outage)
    assert len(caught_up) == MAX_CATCH_UP and caught_up[-1] == long_outage
    assert every.missed(start, start + 59_999) == []


def walked_catch_up(schedule: Plan, last_ms: int, now_ms: int, fired: int) -> tuple[list[int], int]:
    """What a catch-up is, slot by slot: the reference the bounded one is held to."""
    keep = 1 if schedule.misfire == "skip" else MAX_CATCH_UP
    passed = take_while_due(schedule.slots_after(last_ms, fired), now_ms)
    return passed[-keep:], min(len(passed), plan.MAX_COUNTED)


def take_while_due(slots: Any, now_ms: int) -> list[int]:
    return list(itertools.takewhile(lambda s: s <= now_ms, slots))


HOUR_MS = 3_600_000
# Spans that cross Paris's and New York's daylight-saving transitions of 2026.
TRANSITIONS = [ms("2026-03-29T01:00:00+00:00"), ms("2026-10-25T01:00:00+00:00")]


@settings(max_examples=300, deadline=None)
@given(
    every=st.integers(1, 7200),
    start_offset=st.one_of(st.none(), st.integers(-10 * HOUR_MS, 10 * HOUR_MS)),
    end_offset=st.one_of(st.none(), st.integers(0, 40 * HOUR_MS)),
    limit=st.one_of(st.none(), st.integers(1, 500)),
    fired=st.integers(0, 600),
    last_offset=st.integers(-5 * HOUR_MS, 5 * HOUR_MS),
    span=st.integers(0, 30 * HOUR_MS),
    misfire=st.sampled_from(plan.MISFIRE_POLICIES),
)
def test_an_interval_catch_up_is_the_slots_walked_one_by_one(
    every: int,
    start_offset: int | None,
    end_offset: int | None,
    limit: int | None,
    fired: int,
    last_offset: int,
    span: int,
    misfire: str,
) -> None:
    start_at = None if start_offset is None else NOW + start_offset
    end_at = None if end_offset is None else (start_at or NOW) + end_offset + 1
    schedule = Plan(
        every_s=every,
        start_at_ms=start_at,
        end_at_ms=end_at,
        limit=limit,
        misfire=misfire,
        anchor_ms=NOW if start_at is None else start_at,
    )
    last = NOW + last_offset
    assert schedule.catch_up(last, last + span, fired) == walked_catch_up(
        schedule, last, last + span, fired
    )


@settings(max_examples=150, deadline=None)
@given(
    cron=st.sampled_from(["* * * * *", "*/7 * * * *", "30 2 * * *", "0 * * * 1-5", "15 1-3 * * *"]),
    timezone=st.sampled_from(["UTC", "Europe/Paris", "America/New_York"]),
    transition=st.sampled_from(TRANSITIONS),
    last_offset=st.integers(-30 * HOUR_MS, 0),
    span=st.integers(0, 60 * HOUR_MS),
    misfire=st.sampled_from(plan.MISFIRE_POLICIES),
    counted=st.sampled_from([5, 40, plan.MAX_COUNTED]),
)
def test_a_cron_catch_up_is_the_slots_walked_one_by_one_however_long_the_span(
    cron: str,
    timezone: str,
    transition: int,
    last_offset: int,
    span: int,
    misfire: str,
    counted: int,
) -> None:
    """Spans of more slots than ``MAX_COUNTED`` (made small here) read their latest slots back
    from the end; they are the same slots as a walk gives, through daylight-saving changes."""
    schedule = Plan(cron=cron, timezone=timezone, misfire=misfire)
    last = transition + last_offset
    with unittest.mock.patch.object(plan, "MAX_COUNTED", counted):
        assert schedule.catch_up(last, last + span, 0) == walked_catch_up(
            schedule, last, last + span, 0
        )


def test_a_catch_up_after_centuries_counts_its_slots_without_walking_them() -> None:
    """An every-second plan a thousand years late has 31 billion slots: walked one by one,
    this test would run past its timeout. A minutely cron plan a century late finds its
    latest slot, not one within the years a cron plan is searched ahead."""
    start = ms("2026-11-29T10:00:00+00:00")
    millennium = start + 1000 * 365 * 24 * HOUR_MS
    every = Plan(every_s=1, start_at_ms=start, anchor_ms=start, misfire="all")
    due, passed = every.catch_up(start, millennium + 999)
    assert due == [millennium - k * 1000 for k in reversed(range(MAX_CATCH_UP))]
    assert passed == plan.MAX_COUNTED
    century = start + 100 * 365 * 24 * HOUR_MS
    minutes = Plan(cron="* * * * *", end_at_ms=century - 30_000)
    due, passed = minutes.catch_up(start, century)
    assert due == [century - 60_000] and passed == plan.MAX_COUNTED
    assert take_while_due(minutes.slots_after(century - 120_001), century) == [
        century - 120_000,
        century - 60_000,
    ]


NOW = ms("2026-11-29T10:00:00+00:00")


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        ({}, 'either "cron" or "every"'),
        ({"cron": "* * * * *", "every": 60}, 'either "cron" or "every"'),
        ({"cron": "61 * * * *"}, "is not valid"),
        ({"cron": "0 0 30 2 *"}, "is not valid"),
        ({"cron": "0 9 * * * *"}, "5-field"),
        ({"cron": 5}, "5-field"),
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus_Mons"}, "IANA"),
        ({"cron": "0 9 * * *", "timezone": "../../etc/passwd"}, "IANA"),
        ({"cron": "0 9 * * *", "timezone": 1}, "IANA"),
        ({"every": 0}, "integer of seconds"),
        ({"every": 0.5}, "integer of seconds"),
        ({"every": True}, "integer of seconds"),
        ({"every": 10**9}, "integer of seconds"),
        ({"every": 60, "start_at": "tomorrow"}, "RFC 3339"),
        ({"every": 60, "start_at": "2030-01-01T09:00:00"}, "RFC 3339"),
        ({"every": 60, "start_at": "2030-01-02T00:00Z", "end_at": "2030-01-01T00:00Z"}, "after"),
        ({"every": 60, "limit": 0}, "positive integer"),
        ({"every": 60, "misfire": "some"}, '"skip" or "all"'),
        ({"every": 60, "end_at": "2020-01-01T00:00:00Z"}, "no slot after now"),
        ({"cron": "* * * * *", "start_at": "9999-12-31T23:59:59Z"}, "before 9000-01-01"),
        ({"cron": "0 0 29 2 *", "start_at": "8998-01-01T00:00:00Z"}, "no slot after now"),
    ],
)
def test_a_plan_that_cannot_be_is_refused_saying_why(
    document: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(errors.InvalidRequest) as refused:
        plan.parse(document, NOW, min_interval_s=1)
    assert fragment in refused.value.description


def test_the_minimum_interval_is_the_configured_one() -> None:
    with pytest.raises(
        errors.InvalidRequest, match=r"from 5 .*\[transport\] min_schedule_interval"
    ):
        plan.parse({"every": 4}, NOW, min_interval_s=5)
    assert plan.parse({"every": 5}, NOW, min_interval_s=5).every_s == 5


def test_a_parsed_plan_keeps_what_the_body_said() -> None:
    parsed = plan.parse(
        {
            "cron": "0  9 * * 1-5",
            "timezone": "Europe/Paris",
            "start_at": "2027-01-01T00:00:00+01:00",
            "limit": 10,
            "misfire": "all",
        },
        NOW,
        min_interval_s=1,
    )
    assert parsed == Plan(
        cron="0 9 * * 1-5",
        timezone="Europe/Paris",
        start_at_ms=ms("2027-01-01T00:00:00+01:00"),
        limit=10,
        misfire="all",
        anchor_ms=ms("2027-01-01T00:00:00+01:00"),
    )
    assert utc(parsed.next_slots(NOW, 1)) == ["2027-01-01T08:00Z"]  # a Friday


def test_slots_decades_apart_are_found_and_the_plan_goes_on_past_each_gap() -> None:
    """February 29th skips 2100, and the fifth Friday of February comes 12 to 40 years apart
    (the longest two slots of any expression can be apart): each next slot is found, so such
    a plan is written and keeps firing."""
    fifth_friday = plan.parse({"cron": "0 9 * 2 5#5"}, NOW, min_interval_s=1)
    assert utc(fifth_friday.next_slots(NOW, 5)) == [
        "2036-02-29T09:00Z",
        "2064-02-29T09:00Z",
        "2092-02-29T09:00Z",
        "2104-02-29T09:00Z",
        "2132-02-29T09:00Z",
    ]
    assert utc(fifth_friday.next_slots(ms("2188-02-29T09:00:00+00:00"), 1)) == ["2228-02-29T09:00Z"]
    leap_day = Plan(cron="0 0 29 2 *")
    assert utc(leap_day.next_slots(ms("2096-02-29T00:00:00+00:00"), 1)) == ["2104-02-29T00:00Z"]
    assert utc(
        leap_day.missed(ms("2096-02-29T00:00:00+00:00"), ms("2105-01-01T00:00:00+00:00"))
    ) == ["2104-02-29T00:00Z"]


def test_no_slot_is_after_the_year_9000() -> None:
    """Slots stop at ``LATEST_SLOT_MS``, well inside Python's dates, whatever the plan."""
    start = plan.LATEST_SLOT_MS - 10 * 60_000
    minutes = Plan(cron="* * * * *", timezone="Etc/GMT+12", start_at_ms=start)
    assert minutes.next_slots(start - 1, 20) == [start + k * 60_000 for k in range(11)]
    yearly = Plan(every_s=366 * 86400, start_at_ms=start, anchor_ms=start, misfire="all")
    assert yearly.next_slots(start - 1, 5) == [start]
    assert yearly.catch_up(start - 1, plan.LATEST_SLOT_MS + 10**12) == ([start], 1)
