"""The server runs without the pipeline's dependencies."""

from __future__ import annotations

import subprocess
import sys


def test_the_server_never_imports_spark_or_plotting() -> None:
    code = (
        "import sys\n"
        "import zaqar_delay.api.app, zaqar_delay.api.wsgi, zaqar_delay.cmd.server\n"
        "import zaqar_delay.journal, zaqar_delay.validation\n"
        "loaded = sorted(m for m in ('pyspark', 'matplotlib', 'py4j') if m in sys.modules)\n"
        "print(','.join(loaded))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == ""
