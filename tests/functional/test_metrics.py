"""GET /metrics on the real server: counters summed over both gunicorn workers, queue state
read from the store, lateness and request latency histograms."""

from __future__ import annotations

import time
import uuid

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from testbed.processes import ServiceProcess

pytestmark = pytest.mark.functional


def scrape(service: ServiceProcess) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    response = requests.get(f"{service.url}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def test_metrics_across_workers(embedded_service: ServiceProcess) -> None:
    queue = f"m-{uuid.uuid4().hex[:8]}"
    headers = {"Client-ID": str(uuid.uuid4()), "X-Project-ID": "metrics"}
    url = f"{embedded_service.url}/v2/queues/{queue}"
    # Many small requests, so both workers (separate processes) serve some of them.
    for _ in range(20):
        assert (
            requests.post(
                f"{url}/messages", json={"messages": [{"body": 1}]}, headers=headers
            ).status_code
            == 201
        )
    refused = {"messages": [{"body": "x", "delay": 0, "deliver_at": _in_minutes(1)}]}
    assert requests.post(f"{url}/messages", json=refused, headers=headers).status_code == 400
    later = {"messages": [{"body": "later", "deliver_at": _in_minutes(5)}]}
    assert requests.post(f"{url}/messages", json=later, headers=headers).status_code == 201
    for _ in range(5):
        claimed = requests.post(f"{url}/claims?limit=2", headers=headers)
        assert claimed.status_code == 201
    samples = scrape(embedded_service)
    key = (("project", "metrics"), ("queue", queue))
    assert samples["zaqar_delay_messages_posted_total"][key] == 21
    assert samples["zaqar_delay_messages_claimed_total"][key] == 10
    assert samples["zaqar_delay_queue_claimed_messages"][key] == 10
    assert samples["zaqar_delay_queue_delayed_messages"][key] == 1
    assert samples["zaqar_delay_claim_lateness_seconds_count"][()] >= 10
    routes = {dict(k)["route"] for k in samples["zaqar_delay_request_duration_seconds_count"]}
    assert "/v2/queues/{queue_name}/messages" in routes


def _in_minutes(minutes: int) -> int:
    return time.time_ns() // 1_000_000 + minutes * 60_000
