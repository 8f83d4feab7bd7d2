"""The side-by-side table (benchmarks/compare.py): medians and ratios of the runs that did
not fail; a failed run is kept in the results, not in the figures."""

from __future__ import annotations

from typing import Any

from benchmarks.compare import OURS, PEER, table


def backlog_report(p50_small: float, p50_large: float) -> dict[str, Any]:
    return {
        "sizes": [
            {"claim_ms": {"p50": p50_small}, "redis_bytes_per_message": 400.0},
            {"claim_ms": {"p50": p50_large}, "redis_bytes_per_message": 200.0},
        ],
        "claim_p50_ratio_largest_to_smallest": p50_large / p50_small,
    }


def row(rows: list[dict[str, Any]], metric: str) -> dict[str, Any]:
    [found] = [r for r in rows if r["metric"] == metric]
    return found


def test_a_failed_run_leaves_its_cell_empty_and_the_others_stand() -> None:
    failed = {"scenario": "backlog", "label": PEER, "failed": "BUSY Redis is busy running a script"}
    rows = table(
        {
            "produce": {
                PEER: [{"messages_per_s": 1000.0}, {"messages_per_s": 1200.0}],
                OURS: [{"messages_per_s": 5000.0}, {"messages_per_s": 6000.0}],
            },
            "backlog": {PEER: [failed], OURS: [backlog_report(0.4, 0.5)]},
        }
    )
    produce = row(rows, "produce, messages/s (1 per POST)")
    assert (produce[PEER], produce[OURS], produce["ratio"]) == (1100.0, 5500.0, 5.0)
    large = row(rows, "backlog: claim p50 at largest, ms")
    assert (large[PEER], large[OURS], large["ratio"]) == (None, 0.5, None)


def test_a_scenario_that_failed_in_one_round_is_the_median_of_the_others() -> None:
    failed = {"scenario": "backlog", "label": PEER, "failed": "timed out"}
    rows = table(
        {"backlog": {PEER: [failed, backlog_report(10.0, 1000.0)], OURS: [backlog_report(1, 2)]}}
    )
    large = row(rows, "backlog: claim p50 at largest, ms")
    assert (large[PEER], large[OURS], large["ratio"]) == (1000.0, 2, 500.0)
