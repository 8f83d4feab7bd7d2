"""Logging the oslo.log way, on a real zaqar-delay-server: ``debug``, ``log_file``,
``use_json``, ``log_config_append``; the request id of each request in its log lines; a
clean shutdown."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from testbed.processes import ServiceProcess

pytestmark = pytest.mark.functional

HEADERS = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c", "X-Project-ID": "p"}


def served(conf: Path) -> ServiceProcess:
    return ServiceProcess(args=["--config-file", str(conf)], workers=1).start()


def lines_with(path: Path, text: str, timeout_s: float = 10.0) -> list[str]:
    """The lines of ``path`` that contain ``text``, once there is one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            found = [line for line in path.read_text().splitlines() if text in line]
            if found:
                return found
        time.sleep(0.1)
    raise AssertionError(f"no line of {path} names {text}")


def request_id_of(server: ServiceProcess) -> str:
    answer = requests.get(server.url + "/v2/queues", headers=HEADERS, timeout=10)
    assert answer.status_code == 200
    return str(answer.headers["x-openstack-request-id"])


def stop_cleanly(server: ServiceProcess) -> None:
    """SIGTERM, as a service manager stops it; the server must exit by itself."""
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(30) == 0
    server.process = None


def test_json_lines_in_the_log_file_carry_the_request_id(tmp_path: Path) -> None:
    log_file = tmp_path / "zaqar-delay.log"
    conf = tmp_path / "logging.conf"
    conf.write_text(f"[DEFAULT]\ndebug = true\nuse_json = true\nlog_file = {log_file}\n")
    server = served(conf)
    try:
        request_id = request_id_of(server)
        (line,) = lines_with(log_file, request_id)
        record: dict[str, Any] = json.loads(line)
        assert record["context"]["request_id"] == request_id
        assert record["levelname"] == "DEBUG"
        assert "GET /v2/queues 200" in record["message"]
        # Another request, another id in its own line.
        assert lines_with(log_file, request_id_of(server)) != [line]
        stop_cleanly(server)
    finally:
        server.stop()
    text = log_file.read_text() + server.log()
    assert "Traceback" not in text


def test_plain_lines_name_the_request_id_and_info_hides_debug(tmp_path: Path) -> None:
    log_file = tmp_path / "plain.log"
    conf = tmp_path / "logging.conf"
    conf.write_text(f"[DEFAULT]\nlog_file = {log_file}\n")
    server = served(conf)
    try:
        request_id = request_id_of(server)
        # Without debug the request line is not logged; the server's start is (INFO).
        lines_with(log_file, "serving on http://")
        assert request_id not in log_file.read_text()
    finally:
        server.stop()
    debug_conf = tmp_path / "debug.conf"
    debug_conf.write_text(f"[DEFAULT]\ndebug = true\nlog_file = {log_file}\n")
    server = served(debug_conf)
    try:
        request_id = request_id_of(server)
        (line,) = lines_with(log_file, request_id)
        assert f"[None {request_id} " in line and "GET /v2/queues 200" in line
    finally:
        server.stop()


def test_a_line_names_its_own_request_while_the_worker_serves_others(tmp_path: Path) -> None:
    """The gevent worker serves requests side by side in one thread: each line must name the
    request (and project) it was logged for, not the one the worker read last."""
    log_file = tmp_path / "concurrent.log"
    conf = tmp_path / "logging.conf"
    conf.write_text(f"[DEFAULT]\ndebug = true\nlog_file = {log_file}\n")
    server = served(conf)  # one worker: every request below shares its thread
    try:
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(
                requests.post,
                server.url + "/v2/queues/held/claims?wait=2",
                json={"ttl": 60},
                headers={**HEADERS, "X-Project-ID": "waiter"},
                timeout=30,
            )
            others = []
            while not held.done():  # requests of another project while the claim waits
                others.append(request_id_of(server))
                time.sleep(0.1)
            answer = held.result()
        assert answer.status_code == 204
        held_id = answer.headers["x-openstack-request-id"]
        # The other requests were served while the claim waited.
        assert len(others) >= 10
        (line,) = lines_with(log_file, "POST /v2/queues/held/claims 204")
        assert f"[None {held_id} - waiter " in line, line
        assert not any(other in line for other in others)
    finally:
        server.stop()


def test_log_config_append_takes_over(tmp_path: Path) -> None:
    appended = tmp_path / "appended.log"
    ini = tmp_path / "logging.ini"
    ini.write_text(
        "[loggers]\nkeys = root\n"
        "[handlers]\nkeys = file\n"
        "[formatters]\nkeys = context\n"
        "[logger_root]\nlevel = DEBUG\nhandlers = file\n"
        f"[handler_file]\nclass = FileHandler\nformatter = context\nargs = ('{appended}',)\n"
        "[formatter_context]\nclass = oslo_log.formatters.ContextFormatter\n"
    )
    conf = tmp_path / "logging.conf"
    conf.write_text(f"[DEFAULT]\nlog_config_append = {ini}\n")
    server = served(conf)
    try:
        request_id = request_id_of(server)
        (line,) = lines_with(appended, request_id)
        assert "GET /v2/queues 200" in line
    finally:
        server.stop()


def test_an_unusable_log_config_append_is_a_one_line_error(tmp_path: Path) -> None:
    conf = tmp_path / "logging.conf"
    conf.write_text(f"[DEFAULT]\nlog_config_append = {tmp_path / 'missing.ini'}\n")
    ran = subprocess.run(
        [sys.executable, "-m", "zaqar_delay.cmd.server", "--config-file", str(conf)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 2
    assert "Traceback" not in ran.stderr
    (line,) = ran.stderr.strip().splitlines()
    assert line.startswith("zaqar-delay-server: ") and "missing.ini" in line
