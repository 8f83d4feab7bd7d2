"""The lateness chart of ``report``: one panel per queue, lateness over time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display is needed or wanted

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter

# Plain numbers on the log axis ("40", not "4x10^1").
PLAIN = FuncFormatter(lambda value, _: f"{value:g}")
# Panels drawn at most; the queues with the most deliveries are shown.
MAX_PANELS = 8


def lateness_png(minutes: Sequence[dict[str, Any]], path: str) -> None:
    """Draw p50, p99 and max lateness per minute for each queue, on a log scale, with the
    deliveries per minute behind them; deliveries before due are marked in red."""
    by_queue: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in minutes:
        by_queue.setdefault((row["project"], row["queue"]), []).append(row)
    ranked = sorted(by_queue, key=lambda k: -sum(r["claimed"] for r in by_queue[k]))
    shown = ranked[:MAX_PANELS] or [("", "")]
    figure, axes = plt.subplots(
        len(shown), 1, figsize=(11, 2.6 * len(shown) + 0.8), sharex=True, squeeze=False
    )
    for axis, key in zip(axes[:, 0], shown, strict=True):
        _panel(axis, key, sorted(by_queue.get(key, []), key=lambda r: r["minute"]))
    axes[-1, 0].set_xlabel("minute (UTC)")
    early = sum(r["delivered_before_due"] for r in minutes)
    hidden = len(ranked) - len(shown)
    title = f"Lateness of first deliveries (first claim - due) · delivered before due: {early}"
    if hidden > 0:
        title += f" · {hidden} smaller queues not shown"
    figure.suptitle(title, fontsize=11)
    figure.autofmt_xdate()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _panel(axis: Any, key: tuple[str, str], rows: list[dict[str, Any]]) -> None:
    project, queue = key
    axis.set_title(f"{project} / {queue}" if queue else "no deliveries", fontsize=10, loc="left")
    if not rows:
        return
    minutes = [r["minute"] for r in rows]
    volume = axis.twinx()
    volume.bar(minutes, [r["claimed"] for r in rows], width=1 / 1440, color="#d9d9d9", zorder=0)
    volume.set_ylabel("deliveries / min", color="#808080", fontsize=8)
    axis.set_zorder(volume.get_zorder() + 1)
    axis.patch.set_visible(False)
    for column, label, style in (
        ("lateness_p50_ms", "p50", {"color": "#1f77b4", "linewidth": 1.8}),
        ("lateness_p99_ms", "p99", {"color": "#ff7f0e", "linewidth": 1.2}),
        ("lateness_max_ms", "max", {"color": "#7f7f7f", "linewidth": 0.8, "linestyle": ":"}),
    ):
        points = [
            (m, r[column]) for m, r in zip(minutes, rows, strict=True) if r[column] is not None
        ]
        if points:
            axis.plot(
                *zip(*[(m, max(v, 0.1)) for m, v in points], strict=True), label=label, **style
            )
    early = [(m, 0.1) for m, r in zip(minutes, rows, strict=True) if r["delivered_before_due"]]
    if early:
        axis.scatter(
            *zip(*early, strict=True), color="red", marker="v", label="before due", zorder=5
        )
    axis.set_yscale("log")
    axis.yaxis.set_major_formatter(PLAIN)
    axis.yaxis.set_minor_formatter(PLAIN)
    axis.tick_params(axis="y", which="minor", labelsize=7)
    axis.set_ylabel("lateness (ms)")
    axis.grid(True, which="major", alpha=0.3)
    axis.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=8, ncol=4, frameon=False)
