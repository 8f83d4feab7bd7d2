"""The package's commands run as users run them."""

from __future__ import annotations

import os
import subprocess
import sys


def run_server(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zaqar_delay.cmd.server", *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )
