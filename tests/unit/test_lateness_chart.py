"""The report's lateness chart on a run of one minute and on one of a day: what it plots."""

from __future__ import annotations

import datetime
import itertools
import math
import pathlib
import random
from typing import Any

import pytest
from matplotlib.figure import Figure

from zaqar_delay.pipeline import chart

START = datetime.datetime(2027, 1, 15, 8, 0)
ARTIFACTS = pathlib.Path(__file__).resolve().parents[2] / "test-artifacts"


def minute_row(minute: int, p50: float, p99: float, worst: float, early: int = 0) -> dict[str, Any]:
    return {
        "project": "p",
        "queue": "jobs",
        "minute": START + datetime.timedelta(minutes=minute),
        "claimed": 600 + minute % 50,
        "delivered_before_due": early,
        "lateness_p50_ms": p50,
        "lateness_p99_ms": p99,
        "lateness_max_ms": worst,
    }


def distribution_rows(counts: dict[int, int]) -> list[dict[str, Any]]:
    return [{"project": "p", "queue": "jobs", "bin": b, "deliveries": n} for b, n in counts.items()]


def lines_of(figure: Figure) -> dict[str, Any]:
    over_time = figure.axes[0]
    return {line.get_label(): line for line in over_time.get_lines()}


def save(figure: Figure, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    figure.savefig(ARTIFACTS / name, dpi=80)


def test_a_run_of_one_minute_shows_points_and_a_bar_within_a_wider_axis() -> None:
    figure = chart.lateness_figure(
        [minute_row(0, 3.0, 12.0, 40.0)], distribution_rows({1: 300, 2: 250, 4: 45, 6: 5})
    )
    save(figure, "lateness-one-minute.png")
    lines = lines_of(figure)
    assert set(lines) == {"p50", "p99", "max"}
    for line in lines.values():
        assert line.get_marker() not in (None, "", "None")  # a single point is visible
        assert len(line.get_xdata()) == 1
    assert lines["p99"].get_ydata()[0] == 12.0
    over_time, spread = figure.axes[0], figure.axes[1]
    left, right = over_time.get_xlim()
    span_days = right - left
    assert span_days * 24 * 60 == pytest.approx(10, abs=0.01)  # widened to ten minutes
    [bar] = [p for a in figure.axes if a not in (over_time, spread) for p in a.patches]
    assert bar.get_width() == pytest.approx(span_days / 10, rel=0.01)  # a tenth, not all
    bars = spread.patches
    assert sum(b.get_width() for b in bars) == 600  # every first delivery, once
    assert [b.get_y() for b in bars] == [1, 2, 10, 50]  # where bins 1, 2, 4 and 6 start


def test_a_day_of_minutes_spans_exactly_the_day() -> None:
    rng = random.Random(7)
    rows = []
    for minute in range(1440):
        p50 = rng.uniform(2, 5)
        rows.append(minute_row(minute, p50, p50 * 4, p50 * 20, early=int(minute == 700)))
    figure = chart.lateness_figure(rows, distribution_rows({0: 10, 1: 50_000, 3: 700, 9: 3}))
    save(figure, "lateness-one-day.png")
    over_time = figure.axes[0]
    left, right = over_time.get_xlim()
    assert (right - left) * 24 == pytest.approx(24, abs=0.001)
    lines = lines_of(figure)
    assert len(lines["p50"].get_xdata()) == 1440
    assert lines["p50"].get_markersize() < 4  # dots, not a smear of symbols
    early = [c for c in over_time.collections if c.get_label() == "before due"]
    assert len(early) == 1 and len(early[0].get_offsets()) == 1
    lows, highs = over_time.get_ylim()
    assert lows <= chart.FLOOR_MS and highs >= max(r["lateness_max_ms"] for r in rows)
    spread = figure.axes[1]
    assert sum(b.get_width() for b in spread.patches) == 50_713
    assert max(b.get_y() + b.get_height() for b in spread.patches) == 1_000  # bin 9's top


def test_bins_cover_the_axis_from_the_floor_up() -> None:
    edges = chart.bin_edges()
    assert len(edges) == chart.BIN_COUNT + 1
    assert edges[0] == chart.FLOOR_MS and all(a < b for a, b in itertools.pairwise(edges))
    assert math.isclose(edges[-1], chart.LATENESS_BINS_MS[-1] * 10)


def test_no_deliveries_draws_an_empty_row() -> None:
    figure = chart.lateness_figure([], [])
    assert figure.axes[0].get_title(loc="left") == "no deliveries"
    assert not lines_of(figure)
