"""Fuzz a running server with schemathesis from its own OpenAPI description: zero 5xx.

Bounded by a fixed seed and 50 examples per operation and phase, so it fits in every CI run;
a longer run is the same command with larger numbers. Not by ``--max-time``: schemathesis
takes that as a budget to spend whole, generating past the examples' bound until it runs out.
Waiting claims are capped at 1 second on this server so generated ``wait`` values do not
stall the run. The server pools (its own store as the virtual pool) with the admin API open,
so every operation the description names is served and fuzzed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from testbed.processes import ServiceProcess
from zaqar_delay.api import openapi
from zaqar_delay.conf import Limits

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fuzz_target() -> Iterator[ServiceProcess]:
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as conf:
        conf.write(
            "[DEFAULT]\npooling = true\nadmin_mode = true\n"
            "[pooling:catalog]\nenable_virtual_pool = true\ncatalog_refresh = 0.05\n"
            "[transport]\nmax_claim_wait = 1\n"
        )
    service = ServiceProcess(args=["--config-file", conf.name], workers=2).start()
    yield service
    service.stop()


def test_the_served_description_is_the_one_in_the_repository(
    fuzz_target: ServiceProcess,
) -> None:
    served = requests.get(f"{fuzz_target.url}/openapi.json", timeout=10)
    assert served.status_code == 200
    # The server describes the limits it enforces: here max_claim_wait = 1.
    assert served.json() == openapi.document(Limits(max_claim_wait=1))
    claims = served.json()["paths"]["/v2/queues/{queue_name}/claims"]["post"]["parameters"]
    assert [p["schema"]["maximum"] for p in claims if p["name"] == "wait"] == [1]
    # With the default limits it is the document in the repository.
    assert openapi.document() == json.loads((ROOT / "etc" / "openapi.json").read_text())


@pytest.mark.fuzz
def test_schemathesis_finds_no_server_error_and_answers_as_described(
    fuzz_target: ServiceProcess,
) -> None:
    st = shutil.which("st", path=str(Path(sys.executable).parent)) or "st"
    report = Path(fuzz_target.data_dir) / "schemathesis.xml"
    run = subprocess.run(
        [
            st,
            "run",
            f"{fuzz_target.url}/openapi.json",
            # No 5xx, and every answer as the description says: status, content type, body.
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,"
            "response_schema_conformance",
            "--max-examples",
            "50",
            "--seed",
            "20261122",
            "--request-timeout",
            "15",
            # One worker: schemathesis' coverage phase is not thread-safe in this version.
            "--workers",
            "1",
            "--report",
            "junit",
            "--report-junit-path",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=fuzz_target.data_dir,  # schemathesis keeps its state in the working directory
    )
    print(run.stdout[-3000:])
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "Internal Server Error" not in fuzz_target.log()
