"""Where a benchmark's numbers are kept: one JSON file per run, named for the benchmark and
the time it ran."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


def write(results: Path, kind: str, report: Any) -> Path:
    """Write ``report`` to ``results/<kind>-<time>.json`` (the folder made if missing), print
    where, and return the path."""
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print("written", path)
    return path
