"""The lateness chart of ``report``: one row per queue, lateness over time beside its
distribution.

Each row has two panels sharing the lateness axis (log scale): on the left p50, p99 and max
per minute, with markers so a run of one minute still shows its points, over the deliveries
per minute; on the right how the run's first deliveries spread over lateness bins
(:data:`LATENESS_BINS_MS`), so the shape of the whole run reads at a glance. The time axis
spans the data, widened to :data:`MIN_SPAN` for short runs so one minute's bar stays a bar.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display is needed or wanted

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

# Plain numbers on the log axis ("40", not "4x10^1").
PLAIN = FuncFormatter(lambda value, _: f"{value:g}")
# Rows drawn at most; the queues with the most deliveries are shown.
MAX_PANELS = 8
# Lateness is drawn from here up: a log axis has no zero, and an on-time delivery (0 ms, or
# early, which the red markers and the title count) sits on this floor.
FLOOR_MS = 0.1
# Upper edges of the distribution's bins, in ms; the last bin takes everything above.
LATENESS_BINS_MS = (
    1,
    2,
    5,
    10,
    20,
    50,
    100,
    200,
    500,
    1_000,
    2_000,
    5_000,
    10_000,
    30_000,
    60_000,
    300_000,
    3_600_000,
)
# Bins of the distribution: one per upper edge, and one above the last.
BIN_COUNT = len(LATENESS_BINS_MS) + 1
# A shorter run is drawn on this much time, centred, so a minute's bar is a tenth of it.
MIN_SPAN = datetime.timedelta(minutes=10)
MINUTE = datetime.timedelta(minutes=1)
# Past this many minutes the per-minute markers shrink to dots.
MANY_MINUTES = 120
SERIES = (
    ("lateness_p50_ms", "p50", {"color": "#1f77b4", "linewidth": 1.8, "marker": "o"}),
    ("lateness_p99_ms", "p99", {"color": "#ff7f0e", "linewidth": 1.2, "marker": "s"}),
    ("lateness_max_ms", "max", {"color": "#7f7f7f", "linewidth": 0.8, "marker": "^"}),
)


def bin_edges() -> list[float]:
    """The distribution's bin edges in ms, from :data:`FLOOR_MS` up (one more than bins)."""
    return [FLOOR_MS, *LATENESS_BINS_MS, LATENESS_BINS_MS[-1] * 10]


def lateness_png(
    minutes: Sequence[dict[str, Any]],
    path: str,
    distribution: Sequence[dict[str, Any]] = (),
) -> None:
    """Write :func:`lateness_figure` as a PNG to ``path``."""
    figure = lateness_figure(minutes, distribution)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def lateness_figure(
    minutes: Sequence[dict[str, Any]], distribution: Sequence[dict[str, Any]] = ()
) -> Figure:
    """p50, p99 and max lateness per minute for each queue over its deliveries per minute,
    deliveries before due marked in red, and beside them the first deliveries per lateness
    bin. ``minutes`` are ``report.per_minute`` rows; ``distribution`` rows are
    ``report.lateness_distribution`` rows (project, queue, bin index, deliveries)."""
    by_queue: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in minutes:
        by_queue.setdefault((row["project"], row["queue"]), []).append(row)
    counts: dict[tuple[str, str], list[int]] = {}
    for row in distribution:
        bins = counts.setdefault((row["project"], row["queue"]), [0] * BIN_COUNT)
        bins[row["bin"]] += row["deliveries"]
    ranked = sorted(by_queue, key=lambda k: -sum(r["claimed"] for r in by_queue[k]))
    shown = ranked[:MAX_PANELS] or [("", "")]
    figure, axes = plt.subplots(
        len(shown),
        2,
        figsize=(12, 2.8 * len(shown) + 0.9),
        sharex="col",
        sharey="row",
        squeeze=False,
        gridspec_kw={"width_ratios": (4, 1)},
    )
    start, end = _time_span([r["minute"] for r in minutes])
    for (over_time, spread), key in zip(axes, shown, strict=True):
        rows = sorted(by_queue.get(key, []), key=lambda r: r["minute"])
        _over_time(over_time, key, rows)
        _spread(spread, counts.get(key))
    axes[-1, 0].set_xlim(start, end)
    locator = mdates.AutoDateLocator()  # type: ignore[no-untyped-call]
    axes[-1, 0].xaxis.set_major_locator(locator)
    axes[-1, 0].xaxis.set_major_formatter(
        mdates.ConciseDateFormatter(locator)  # type: ignore[no-untyped-call]
    )
    axes[-1, 0].set_xlabel("minute (UTC)")
    axes[-1, 1].set_xlabel("first deliveries")
    early = sum(r["delivered_before_due"] for r in minutes)
    hidden = len(ranked) - len(shown)
    title = f"Lateness of first deliveries (first claim - due) · delivered before due: {early}"
    if hidden > 0:
        title += f" · {hidden} smaller queues not shown"
    figure.suptitle(title, fontsize=11)
    figure.tight_layout()
    return figure


def _time_span(minutes: Sequence[datetime.datetime]) -> tuple[datetime.datetime, datetime.datetime]:
    """From the first minute's start to the last one's end, at least :data:`MIN_SPAN`."""
    if not minutes:
        now = datetime.datetime(2000, 1, 1)
        return now, now + MIN_SPAN
    start, end = min(minutes), max(minutes) + MINUTE
    missing = MIN_SPAN - (end - start)
    if missing > datetime.timedelta(0):
        start, end = start - missing / 2, end + missing / 2
    return start, end


def _over_time(axis: Any, key: tuple[str, str], rows: list[dict[str, Any]]) -> None:
    project, queue = key
    axis.set_title(f"{project} / {queue}" if queue else "no deliveries", fontsize=10, loc="left")
    axis.set_yscale("log")
    # Labels at 1, 2 and 5 of each decade: readable on a narrow range and on a wide one.
    axis.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.yaxis.set_major_formatter(PLAIN)
    axis.yaxis.set_minor_formatter(NullFormatter())
    axis.set_ylabel("lateness (ms)")
    axis.grid(True, which="major", alpha=0.3)
    if not rows:
        return
    minutes = [r["minute"] for r in rows]
    volume = axis.twinx()
    # Each bar covers its own minute; the lateness points sit at the minute's middle.
    volume.bar(minutes, [r["claimed"] for r in rows], width=MINUTE, align="edge", color="#e3e3e3")
    # Bars up to 40% of the height: behind the lines, not a wall.
    volume.set_ylim(0, max(r["claimed"] for r in rows) * 2.5 or 1)
    volume.set_ylabel("deliveries / min", color="#808080", fontsize=8)
    volume.tick_params(axis="y", labelsize=7, colors="#808080")
    axis.set_zorder(volume.get_zorder() + 1)
    axis.patch.set_visible(False)
    marker_size = 4.0 if len(rows) <= MANY_MINUTES else 1.5
    for column, label, style in SERIES:
        points = [(m + MINUTE / 2, r[column]) for m, r in zip(minutes, rows, strict=True)]
        points = [(m, max(v, FLOOR_MS)) for m, v in points if v is not None]
        if points:
            axis.plot(*zip(*points, strict=True), label=label, markersize=marker_size, **style)
    early = [
        (m + MINUTE / 2, FLOOR_MS)
        for m, r in zip(minutes, rows, strict=True)
        if r["delivered_before_due"]
    ]
    if early:
        axis.scatter(
            *zip(*early, strict=True), color="red", marker="v", label="before due", zorder=5
        )
    axis.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=8, ncol=4, frameon=False)


def _spread(axis: Any, counts: list[int] | None) -> None:
    """Horizontal bars: first deliveries per lateness bin, on the row's lateness axis."""
    axis.set_title("distribution", fontsize=9, loc="left")
    axis.grid(True, axis="x", alpha=0.3)
    if not counts or not any(counts):
        return
    edges = bin_edges()
    # Only bins that hold deliveries: empty ones would stretch the shared lateness axis.
    held = [(edges[i], edges[i + 1], n) for i, n in enumerate(counts) if n]
    axis.barh(
        [low for low, _, _ in held],
        [n for _, _, n in held],
        height=[high - low for low, high, _ in held],
        align="edge",
        color="#1f77b4",
        alpha=0.7,
    )
    axis.set_xlim(0, max(counts) * 1.1)
    axis.tick_params(axis="x", labelsize=7)
