"""python-zaqarclient's v2 client, unchanged, against the real server."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from zaqarclient.queues import client as zaqar

from testbed.processes import ServiceProcess

pytestmark = pytest.mark.functional


def make_client(service: ServiceProcess, project: str | None = None) -> Any:
    conf = {
        "auth_opts": {
            "backend": "noauth",
            "options": {"os_project_id": project or f"p-{uuid.uuid4().hex[:8]}"},
        }
    }
    return zaqar.Client(service.url, version=2, conf=conf)


def test_queue_lifecycle_and_metadata(service: ServiceProcess) -> None:
    cli = make_client(service)
    queue = cli.queue("orders", force_create=True)
    queue.metadata(new_meta={"_default_message_ttl": 120, "team": "billing"})
    meta = queue.metadata(force_reload=True)
    assert meta["team"] == "billing" and meta["_default_message_ttl"] == 120
    names = [q.name for q in cli.queues()[0]]
    assert names == ["orders"]
    queue.delete()
    assert [q.name for q in cli.queues()[0]] == []


def test_delayed_post_claim_delete(service: ServiceProcess) -> None:
    cli = make_client(service)
    queue = cli.queue("delayed", force_create=True)
    queue.metadata(new_meta={"_default_message_delay": 2})
    queue.post([{"body": {"job": 1}, "ttl": 300}, {"body": {"job": 2}, "ttl": 300, "delay": 0}])
    visible = list(queue.messages(echo=True))
    assert [m.body for m in visible] == [{"job": 2}]
    everything = list(queue.messages(echo=True, include_delayed=True))
    assert len(everything) == 2
    first = list(queue.claim(ttl=60, grace=60))
    assert [m.body for m in first] == [{"job": 2}]
    deadline = time.monotonic() + 10
    second = queue.claim(ttl=60, grace=60)
    while second.id is None and time.monotonic() < deadline:
        time.sleep(0.1)
        second = queue.claim(ttl=60, grace=60)
    claimed = list(second)
    assert [m.body for m in claimed] == [{"job": 1}]
    for message in [*first, *claimed]:
        message.delete()
    assert queue.stats["messages"]["total"] == 0


def test_claim_update_query_release(service: ServiceProcess) -> None:
    cli = make_client(service)
    queue = cli.queue("work")
    queue.post([{"body": n} for n in range(3)])
    claim = queue.claim(ttl=120, grace=60, limit=2)
    same = queue.claim(id=claim.id)
    assert sorted(m.body for m in same) == [0, 1]
    claim.update(ttl=300)
    assert queue.claim(id=claim.id).ttl == 300
    claim.delete()
    assert queue.stats["messages"]["claimed"] == 0


def test_stats_pop_purge_bulk(service: ServiceProcess) -> None:
    cli = make_client(service)
    queue = cli.queue("misc")
    queue.post([{"body": n} for n in range(5)])
    assert queue.stats["messages"]["total"] == 5
    popped = list(queue.pop(2))
    assert [m.body for m in popped] == [0, 1]
    ids = [m.id for m in queue.messages(echo=True)]
    fetched = list(queue.messages(*ids[:2]))
    assert [m.body for m in fetched] == [2, 3]
    queue.delete_messages(ids[0])
    assert queue.stats["messages"]["total"] == 2
    queue.purge()
    assert queue.stats["messages"]["total"] == 0


def test_ping_homedoc_health(service: ServiceProcess) -> None:
    cli = make_client(service)
    assert cli.ping() is True
    assert "rel/queues" in cli.homedoc()["resources"]


def test_projects_are_isolated(service: ServiceProcess) -> None:
    alice, bob = make_client(service, "alice"), make_client(service, "bob")
    alice.queue("shared-name").post([{"body": "secret"}])
    bob_queue = bob.queue("shared-name")
    assert list(bob_queue.messages(echo=True)) == []
    assert bob_queue.claim(ttl=60, grace=60).id is None
