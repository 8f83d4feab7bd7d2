"""The pipeline against a real server: schedule from a file, consume, report, compare."""

from __future__ import annotations

import datetime
import json
import pathlib
import threading
import time
import uuid
from typing import Any

import pytest
import requests
from pyspark.sql import SparkSession

from testbed.processes import RedisServer, ServiceProcess
from tests.helpers.stores import store_url
from zaqar_delay.conf import STORAGE_URI_ENV
from zaqar_delay.pipeline import cli
from zaqar_delay.pipeline.client import Poster, PostingFailed, Target
from zaqar_delay.pipeline.rows import Prepared

PROJECT = "pipeline-e2e"
HEADERS = {"Client-ID": "5b0ff36c-2a4f-4a0c-9a52-6d3e1f0c7b21", "X-Project-ID": PROJECT}


def epoch_ms() -> int:
    return time.time_ns() // 1_000_000


def write_input(path: pathlib.Path, deliver_at_ms: int) -> None:
    lines = ["queue,body,delay,deliver_at,ttl,dedup_id"]
    for i in range(24):
        queue = "reminders" if i % 2 else "retries"
        lines.append(f'{queue},"{{""n"": {i}}}",{i % 4},,300,')
    lines.append(f'reminders,"""at""",,{deliver_at_ms},,')
    lines.append("reminders,7,,,,given-id")
    lines.append(f'reminders,"{{""n"": 1}}",{1 % 4},,300,')  # row 1 again: a duplicate
    lines.append("reminders,1,5000,,,")  # delay beyond max_message_delay
    lines.append("bad queue,1,,,,")
    path.write_text("\n".join(lines) + "\n")


def read_rejects(directory: pathlib.Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted(directory.glob("*.json"))
        for line in path.read_text().splitlines()
    ]


def consume(url: str, queue: str, count: int) -> list[dict[str, Any]]:
    """Claim and delete ``count`` messages; the first one's claim is released once first."""
    seen: list[dict[str, Any]] = []
    released = False
    deadline = time.monotonic() + 60
    while len(seen) < count and time.monotonic() < deadline:
        answer = requests.post(
            f"{url}/v2/queues/{queue}/claims",
            params={"limit": 5, "wait": 2, "with_schedule": "true"},
            json={"ttl": 60, "grace": 60},
            headers=HEADERS,
            timeout=10,
        )
        received = epoch_ms()
        if answer.status_code == 204:
            continue
        assert answer.status_code == 201, answer.text
        claim_href = answer.headers["Location"]
        if not released:
            assert requests.delete(url + claim_href, headers=HEADERS, timeout=10).status_code == 204
            released = True
            continue
        for message in answer.json()["messages"]:
            due = int(datetime.datetime.fromisoformat(message["due"]).timestamp() * 1000)
            seen.append({"id": message["id"], "due": due, "received": received})
            deleted = requests.delete(url + message["href"], headers=HEADERS, timeout=10)
            assert deleted.status_code == 204
    return seen


def pooled_server(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path, journal: pathlib.Path
) -> ServiceProcess:
    """A pooled server whose two queues live on two pools: "retries" on a redis-server,
    "reminders" on MongoDB (each pool the only one of its flavor)."""
    conf = tmp_path / "pooled.conf"
    conf.write_text("[DEFAULT]\npooling = true\nadmin_mode = true\n")
    service = ServiceProcess(args=["--journal-dir", str(journal), "--config-file", str(conf)])
    service.start()
    namespace = f"t{uuid.uuid4().hex[:12]}"
    pools = {
        "redis": (store_url(request, "redis-server"), {"key_prefix": namespace}),
        "mongo": (store_url(request, "mongodb"), {"database": namespace}),
    }
    for (name, (uri, options)), queue in zip(pools.items(), ("retries", "reminders"), strict=True):
        pool = {"uri": uri, "weight": 10, "options": options}
        for path, body in (
            (f"/v2/pools/{name}", pool),
            (f"/v2/flavors/on-{name}", {"pool_list": [name]}),
            (f"/v2/queues/{queue}", {"_flavor": f"on-{name}"}),
        ):
            answer = requests.put(service.url + path, json=body, headers=HEADERS, timeout=30)
            assert answer.status_code == 201, answer.text
    return service


def placements(url: str) -> dict[str, str]:
    answer = requests.get(f"{url}/v2/placements", headers=HEADERS, timeout=10)
    assert answer.status_code == 200, answer.text
    return {p["queue"]: p["pool"] for p in answer.json()["placements"]}


@pytest.mark.parametrize("pooled", [False, True], ids=["one-store", "pooled"])
def test_schedule_consume_report(
    spark: SparkSession,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
    pooled: bool,
) -> None:
    journal = tmp_path / "journal"
    if pooled:
        service = pooled_server(request, tmp_path, journal)
    else:
        service = ServiceProcess(args=["--journal-dir", str(journal)]).start()
    try:
        source = tmp_path / "reminders.csv"
        deliver_at = epoch_ms() + 2500
        write_input(source, deliver_at)
        schedule = ["schedule", "--input", str(source), "--url", service.url]
        schedule += ["--project", PROJECT, "--rejects", str(tmp_path / "rejects")]
        assert cli.main(schedule) == 0
        first = capsys.readouterr().out
        assert "rows read:          29" in first
        assert "scheduled:          26" in first
        assert "duplicates skipped: 1" in first
        assert "rejected:           2" in first
        rejects = read_rejects(tmp_path / "rejects")
        assert sorted(r["reason"][:30] for r in rejects) == [
            "The Delay TTL for a message ma",
            "The format of the submitted qu",
        ]

        # Rerun once that deliver_at is more than the API's 5 s tolerance in the past.
        time.sleep(max(0.0, (deliver_at + 5500 - epoch_ms()) / 1000))
        assert cli.main(schedule) == 0  # a rerun posts nothing new
        second = capsys.readouterr().out
        assert "scheduled:          0" in second
        assert "duplicates skipped: 26" in second
        # The API's rule: a deliver_at more than 5 s past is refused, on a rerun too.
        assert "rejected:           3" in second
        assert any("seconds in the past" in r["reason"] for r in read_rejects(tmp_path / "rejects"))

        if pooled:
            # Each queue stayed on its pool, and its messages are there.
            assert placements(service.url) == {"retries": "redis", "reminders": "mongo"}
        seen = consume(service.url, "retries", 12) + consume(service.url, "reminders", 14)
        assert len({m["id"] for m in seen}) == 26
        assert all(m["received"] >= m["due"] for m in seen)
    finally:
        service.stop()

    out = tmp_path / "report"
    assert cli.main(["report", "--journal", str(journal), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    totals = summary["totals"]
    assert summary["unreadable_lines"] == 0
    assert summary["deliveries_before_due"] == 0
    assert (totals["posted"], totals["deleted"], totals["first_deliveries"]) == (26, 26, 26)
    # The messages of the two released claims, and only they, were delivered twice.
    assert 2 <= totals["released"] == totals["redelivered"] == totals["claimed"] - 26 <= 10
    by_queue = {q["queue"]: q for q in summary["queues"]}
    assert (by_queue["retries"]["posted"], by_queue["reminders"]["posted"]) == (12, 14)
    worst_seen = max(m["received"] - m["due"] for m in seen)
    for queue in by_queue.values():
        assert 0 <= queue["lateness_p50_ms"] <= queue["lateness_max_ms"] <= worst_seen
    assert (out / "lateness.png").stat().st_size > 10_000


def test_posts_are_retried_until_the_store_is_back() -> None:
    store = RedisServer().start()
    service = ServiceProcess(env={STORAGE_URI_ENV: store.url}).start()
    try:
        store.kill()
        restart = threading.Timer(1.5, store.start)
        restart.start()
        poster = Poster(Target(service.url, PROJECT, backoff_s=0.2, max_backoff_s=0.5, attempts=30))
        try:
            message = Prepared("q", '{"body":1,"ttl":60,"dedup_id":"once"}', 0, None, "once")
            [outcome] = poster.post([message])
            restart.join()
            assert outcome.status == "scheduled" and poster.retries > 0
            assert poster.post([message])[0].status == "duplicate"
        finally:
            poster.close()
    finally:
        service.stop()
        store.stop()


def test_a_post_past_the_project_s_message_quota_stops_the_job_with_the_reason(
    tmp_path: pathlib.Path,
) -> None:
    conf = tmp_path / "quota.conf"
    conf.write_text("[transport]\nmax_messages_per_project = 2\n")
    service = ServiceProcess(args=["--config-file", str(conf)]).start()
    try:
        poster = Poster(Target(service.url, PROJECT))
        try:
            rows = [Prepared("q", f'{{"body":{n},"ttl":60}}', 0, None, str(n)) for n in range(3)]
            assert [o.status for o in poster.post(rows[:2])] == ["scheduled", "scheduled"]
            with pytest.raises(PostingFailed, match=r"answered 403.*max_messages_per_project"):
                poster.post(rows[2:])
        finally:
            poster.close()
    finally:
        service.stop()
