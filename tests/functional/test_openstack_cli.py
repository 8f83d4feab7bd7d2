"""``openstack messaging`` (python-openstackclient with python-zaqarclient's plugin) against a
noauth server, with the exact command line the manual gives (doc/source/manual/running.rst)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import pytest
import requests

from testbed.processes import ServiceProcess

pytestmark = pytest.mark.functional

CLIENT_ID = "3381af92-2b9e-11e3-b191-71861300734c"


def openstack_binary() -> str:
    beside = os.path.join(os.path.dirname(sys.executable), "openstack")
    found = beside if os.path.exists(beside) else shutil.which("openstack")
    if found is None:
        pytest.fail("the openstack command is missing (python-openstackclient, test-requirements)")
    return found


@pytest.fixture(scope="module")
def noauth_server() -> Iterator[ServiceProcess]:
    directory = tempfile.mkdtemp(prefix="zd-cli-")
    config = os.path.join(directory, "zaqar-delay.conf")
    with open(config, "w") as f:
        f.write("[server]\ndefault_project = demo\n")
    service = ServiceProcess(args=["--config-file", config]).start()
    yield service
    service.stop()


def cli(service: ServiceProcess, *args: str) -> subprocess.CompletedProcess[str]:
    # The manual's line: no auth, the endpoint, and a client id for message commands.
    command = [
        openstack_binary(),
        "--os-auth-type",
        "none",
        "--os-endpoint",
        service.url,
        "messaging",
        *args,
    ]
    env = {**os.environ, "OS_MESSAGE_CLIENT_ID": CLIENT_ID}
    for name in [n for n in env if n.startswith("OS_") and n != "OS_MESSAGE_CLIENT_ID"]:
        del env[name]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_queue_and_message_commands_without_a_project_header(
    noauth_server: ServiceProcess,
) -> None:
    ok(cli(noauth_server, "queue", "create", "cli-q"))
    listed = json.loads(ok(cli(noauth_server, "queue", "list", "-f", "json")))
    assert {"Name": "cli-q"} in listed
    ok(cli(noauth_server, "message", "post", "cli-q", '[{"body": {"n": 1}, "ttl": 300}]'))
    messages = json.loads(
        ok(cli(noauth_server, "message", "list", "cli-q", "--echo", "-f", "json"))
    )
    assert [m["Body"] for m in messages] == [{"n": 1}]
    # They went to the configured project.
    seen = requests.get(
        f"{noauth_server.url}/v2/queues",
        headers={"Client-ID": CLIENT_ID, "X-Project-ID": "demo"},
        timeout=10,
    ).json()["queues"]
    assert [q["name"] for q in seen] == ["cli-q"]
    ok(cli(noauth_server, "queue", "delete", "cli-q"))


def test_without_default_project_the_cli_is_refused_as_by_zaqar() -> None:
    service = ServiceProcess().start()
    try:
        result = cli(service, "queue", "list")
        assert result.returncode != 0
        assert "X-PROJECT-ID" in result.stderr or "Project-Id" in result.stderr
    finally:
        service.stop()


def test_subscription_commands(noauth_server: ServiceProcess) -> None:
    hook = "http://127.0.0.1:9/cli-hook"
    created = json.loads(
        ok(cli(noauth_server, "subscription", "create", "cli-s", hook, "600", "-f", "json"))
    )
    sid = created["ID"]
    assert (created["Subscriber"], created["TTL"]) == (hook, 600)
    listed = json.loads(ok(cli(noauth_server, "subscription", "list", "cli-s", "-f", "json")))
    assert [s["ID"] for s in listed] == [sid]
    ok(cli(noauth_server, "subscription", "update", "cli-s", sid, "--ttl", "900"))
    shown = json.loads(ok(cli(noauth_server, "subscription", "show", "cli-s", sid, "-f", "json")))
    assert (shown["ID"], shown["Subscriber"], shown["TTL"]) == (sid, hook, 900)
    ok(cli(noauth_server, "subscription", "delete", "cli-s", sid))
    gone = requests.get(
        f"{noauth_server.url}/v2/queues/cli-s/subscriptions",
        headers={"Client-ID": CLIENT_ID, "X-Project-ID": "demo"},
        timeout=10,
    ).json()["subscriptions"]
    assert gone == []
