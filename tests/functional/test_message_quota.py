"""One project cannot fill the store for the others: the real server (two workers, the embedded
store held to a few MiB) refuses a project past ``[transport] max_messages_per_project`` with
403 long before the store is full, and another project's posts go on.

Without the quota, the same project fills the store, and while it posts on, the other
project's posts answer 503: that is first shown to happen, so the quota is what makes the
difference.
"""

from __future__ import annotations

import os
from pathlib import Path

import redis
import requests

from testbed.processes import ServiceProcess
from tests.helpers.faults import HEADERS
from zaqar_delay.message_quota import SLACK

MOST = 400
POST = 20
BATCH = {"messages": [{"body": "x" * 2000, "ttl": 3600}] * POST}
CALM = {**HEADERS, "X-Project-ID": "calm"}
HOSTILE = {**HEADERS, "X-Project-ID": "hostile"}
WORKERS = 2


def serve(tmp_path: Path, most: int) -> ServiceProcess:
    config = tmp_path / f"quota-{most}.conf"
    config.write_text(
        f"[storage]\nembedded_max_memory = 8\n[transport]\nmax_messages_per_project = {most}\n"
    )
    return ServiceProcess(args=["--config-file", str(config)], workers=WORKERS).start()


def flood(service: ServiceProcess) -> tuple[requests.Response, int]:
    """The hostile project's posts, until one is not stored: that answer and how many
    messages were."""
    stored = 0
    for queue in range(1000):
        response = requests.post(
            f"{service.url}/v2/queues/q{queue % 10}/messages",
            json=BATCH,
            headers=HOSTILE,
            timeout=30,
        )
        if response.status_code != 201:
            return response, stored
        stored += POST
    raise AssertionError("the store took 20,000 messages of 2 KB in 8 MiB")


def held(service: ServiceProcess, project_headers: dict[str, str]) -> int:
    return sum(
        requests.get(
            f"{service.url}/v2/queues/q{n}/stats", headers=project_headers, timeout=30
        ).json()["messages"]["total"]
        for n in range(10)
    )


def calm_post(service: ServiceProcess) -> requests.Response:
    """Another project's post, as large as one of the hostile project's."""
    return requests.post(
        f"{service.url}/v2/queues/q0/messages", json=BATCH, headers=CALM, timeout=30
    )


def used_share(service: ServiceProcess) -> float:
    client = redis.Redis(unix_socket_path=os.path.join(service.data_dir, "redis.sock"))
    try:
        memory = client.info("memory")
        return float(memory["used_memory"]) / float(memory["maxmemory"])
    finally:
        client.close()


def test_without_a_quota_one_project_fills_the_store_for_every_project(tmp_path: Path) -> None:
    service = serve(tmp_path, 0)
    try:
        refused, _ = flood(service)
        assert refused.status_code == 503, refused.text
        assert "is full" in refused.json()["description"]
        assert used_share(service) > 0.9
        # The hostile project posts on; the other project's posts, as large, are refused.
        calm = []
        for _ in range(5):
            requests.post(
                f"{service.url}/v2/queues/q0/messages", json=BATCH, headers=HOSTILE, timeout=30
            )
            calm.append(calm_post(service).status_code)
        assert calm.count(503) >= 4, calm
    finally:
        service.stop()


def test_a_project_at_its_quota_is_refused_and_the_others_post_on(tmp_path: Path) -> None:
    service = serve(tmp_path, MOST)
    try:
        refused, stored = flood(service)
        assert refused.status_code == 403, refused.text
        assert refused.json()["title"] == "Quota exceeded"
        assert "max_messages_per_project" in refused.json()["description"]
        # The refused post stored nothing; the processes together passed the limit by at
        # most their slack.
        assert held(service, HOSTILE) == stored
        assert MOST - POST < stored <= MOST + WORKERS * SLACK
        assert used_share(service) < 0.5
        assert calm_post(service).status_code == 201
    finally:
        service.stop()
