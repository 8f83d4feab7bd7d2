"""A pool whose store is gone takes no new queue while others answer, and a queue no pool
can take is not placed at all (its write answers 503, and the catalog lists nothing)."""

from __future__ import annotations

from collections.abc import Iterator

import falcon.testing
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from testbed.processes import RedisServer, wait_gone
from testbed.receiver import receiver
from tests.helpers.api import PROJECT, Api, pooled_api_on
from tests.helpers.pool_faults import placed_on_a_stopped_pool
from tests.helpers.push import dispatching, subscribe
from zaqar_delay import silent_pools
from zaqar_delay.conf import Limits
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.catalog import PoolRecord


@pytest.fixture
def pooled(request: pytest.FixtureRequest) -> Iterator[Api]:
    yield from pooled_api_on(request)


@pytest.fixture
def gone_pool(pooled: Api) -> Iterator[RedisServer]:
    """A pool "gone" that would take nearly every new queue by weight (and "mongo" none),
    whose redis-server is then stopped."""
    server = RedisServer().start()
    try:
        body = {"uri": server.url, "weight": 10_000}
        assert pooled.put("/v2/pools/gone", json=body).status_code == 201
        assert pooled.patch("/v2/pools/mongo", json={"weight": 0}).status_code == 200
        assert server.process is not None
        pid = server.process.pid
        server.stop()
        wait_gone([pid])
        # The fault happened: the pool's store refuses connections.
        with pytest.raises(redis.ConnectionError):
            redis.Redis(port=server.port, socket_timeout=1).ping()
        yield server
    finally:
        server.stop()


def test_new_queues_go_to_a_pool_that_answers(pooled: Api, gone_pool: RedisServer) -> None:
    for i in range(20):
        created = pooled.put(f"/v2/queues/q{i}")
        assert created.status_code == 201, created.text
        [mid] = pooled.post_messages(f"q{i}", {"body": i})
        assert pooled.get(f"/v2/queues/q{i}/messages/{mid}").json["body"] == i
    stores = pooled.service.stores
    assert {stores.pool_of(PROJECT, f"q{i}") for i in range(20)} == {"redis"}
    assert stores.silent_pools() == {"gone"}

    # Back on its port, the pool takes new queues again.
    back = RedisServer(port=gone_pool.port).start()
    try:
        assert pooled.patch("/v2/pools/redis", json={"weight": 0}).status_code == 200
        assert pooled.put("/v2/queues/back").status_code == 201
        assert stores.pool_of(PROJECT, "back") == "gone"
        assert stores.silent_pools() == set()
    finally:
        back.stop()


def test_a_queue_no_pool_can_take_is_not_placed(pooled: Api, gone_pool: RedisServer) -> None:
    assert pooled.patch("/v2/pools/redis", json={"weight": 0}).status_code == 200
    for write in (
        lambda: pooled.put("/v2/queues/nowhere"),
        lambda: pooled.post("/v2/queues/nowhere/messages", json={"messages": [{"body": 1}]}),
    ):
        refused = write()
        assert refused.status_code == 503, refused.text
        assert set(refused.json) == {"title", "description"}
    assert pooled.service.stores.pool_of(PROJECT, "nowhere") is None
    listed = pooled.get("/v2/queues").json["queues"]
    assert "nowhere" not in [q["name"] for q in listed]


def test_health_names_the_pool_that_does_not_answer(pooled: Api, gone_pool: RedisServer) -> None:
    assert pooled.get("/v2/ping").status_code == 503
    report = pooled.get("/v2/health", headers={"X-Roles": "admin"})
    assert report.status_code == 200, report.text
    assert report.json["storage_reachable"] is False
    assert report.json["stores"] == {
        "default": {"storage_reachable": True},
        "redis": {"storage_reachable": True},
        "mongo": {"storage_reachable": True},
        "gone": {"storage_reachable": False},
    }
    # The operations run on a queue placed on a pool that answers.
    status = report.json["operation_status"]
    assert status and all(step["succeeded"] for step in status.values()), status


def test_pushes_of_the_pools_that_answer_go_on_while_one_is_gone(
    pooled: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = RedisServer(aof=True).start()
    try:
        assert pooled.put("/v2/pools/gone", json={"uri": server.url, "weight": 100}).status_code
        stores = pooled.service.stores
        for pool, queue in (("gone", "away"), ("redis", "kept")):
            # Only the pool named takes the queue.
            for other in ("gone", "redis", "mongo"):
                weight = 100 if other == pool else 0
                assert pooled.patch(f"/v2/pools/{other}", json={"weight": weight}).status_code
            assert pooled.put(f"/v2/queues/{queue}").status_code == 201
            assert stores.pool_of(PROJECT, queue) == pool
        with receiver() as hook, dispatching(pooled) as dispatcher:
            subscribe(pooled, hook, queue="away")
            subscribe(pooled, hook, queue="kept")
            pooled.post_messages("away", {"body": "away"})
            server.stop()
            # The fault happened: the pool's store refuses connections.
            with pytest.raises(redis.ConnectionError):
                server.client().ping()
            pooled.post_messages("kept", {"body": "kept"})

            assert dispatcher.run_once() == 1
            assert [r.json()["body"] for r in hook.wait_for(1)] == ["kept"]
            assert stores.silent_pools() == {"gone"}

            # Back with its data, asked again once its time is out: its push goes.
            server.start()
            monkeypatch.setattr(silent_pools, "SILENT_FOR_S", 0.0)
            assert dispatcher.run_once() == 1
            assert sorted(r.json()["body"] for r in hook.wait_for(2)) == ["away", "kept"]
    finally:
        server.stop()


def test_metrics_answer_while_a_pool_is_away(pooled: Api) -> None:
    server = RedisServer().start()
    try:
        assert pooled.put("/v2/pools/gone", json={"uri": server.url, "weight": 100}).status_code
        for pool, queue in (("gone", "away"), ("redis", "kept")):
            for other in ("gone", "redis", "mongo"):
                weight = 100 if other == pool else 0
                assert pooled.patch(f"/v2/pools/{other}", json={"weight": weight}).status_code
            delayed_queue = pooled.put(f"/v2/queues/{queue}", json={"_default_message_delay": 60})
            assert delayed_queue.status_code == 201
            pooled.post_messages(queue, {"body": queue})
        server.stop()
        with pytest.raises(redis.ConnectionError):
            server.client().ping()  # the fault happened: the pool's store is gone

        scraped = pooled.get("/metrics", headers={"Client-ID": None, "X-Project-ID": None})
        assert scraped.status_code == 200, scraped.text
        delayed = {}
        offsets = set()
        for family in text_string_to_metric_families(scraped.text):
            for sample in family.samples:
                if sample.name == "zaqar_delay_queue_delayed_messages":
                    delayed[sample.labels["queue"]] = sample.value
                elif sample.name == "zaqar_delay_store_clock_offset_seconds":
                    offsets.add(sample.labels["store"])
        # What the pools that answer hold is shown; the one away has no sample.
        assert delayed == {"kept": 1}
        assert offsets == {"default", "redis", "mongo"}
    finally:
        server.stop()


def test_ping_waits_on_no_pool_left_alone(pooled: Api, gone_pool: RedisServer) -> None:
    stores = pooled.service.stores
    opened: list[str] = []
    open_pool = stores.open_pool

    def opening(record: PoolRecord) -> Driver:
        opened.append(record.name)
        return open_pool(record)

    stores.open_pool = opening
    assert pooled.get("/v2/ping").status_code == 503
    assert opened.count("gone") == 1 and stores.silent_pools() == {"gone"}
    # Anyone may ping: while the pool is left alone, a ping answers without asking it.
    for _ in range(5):
        assert pooled.get("/v2/ping").status_code == 503
    assert opened.count("gone") == 1


@pytest.fixture
def subscriptions_limited(request: pytest.FixtureRequest) -> Iterator[Api]:
    yield from pooled_api_on(request, limits=Limits(max_subscriptions_per_project=2))


def subscribe_address(api: Api, queue: str, n: int) -> falcon.testing.Result:
    """Subscribe the n-th address of a closed port (no push is sent here)."""
    body = {"subscriber": f"http://127.0.0.1:9/{n}"}
    return api.post(f"/v2/queues/{queue}/subscriptions", json=body)


def test_a_pool_away_counts_none_of_its_subscriptions(subscriptions_limited: Api) -> None:
    """Counting a project's subscriptions reads each of its queues: one on a pool that does
    not answer counts none, so the project subscribes on the other pools, up to its limit."""
    api = subscriptions_limited

    def place() -> None:
        assert subscribe_address(api, "away", 0).status_code == 201
        assert api.service.stores.pool_of(PROJECT, "away") == "gone"

    with placed_on_a_stopped_pool(api, place):
        # With "away"'s subscription counted, the second here would pass the limit of 2.
        assert subscribe_address(api, "here", 1).status_code == 201
        assert subscribe_address(api, "here", 2).status_code == 201
        assert api.service.stores.pool_of(PROJECT, "here") == "redis"
        refused = subscribe_address(api, "here", 3)
        assert refused.status_code == 403, refused.text
        assert "max_subscriptions_per_project" in refused.json["description"]


def test_a_schedule_fires_while_a_pool_other_than_its_queue_s_is_away(pooled: Api) -> None:
    """A schedule's own queues are on its queue's pool, so a pool away that would have taken
    them (here it takes every new queue when the schedule is written) holds back none of its
    fires."""
    server = RedisServer().start()
    try:
        assert pooled.put("/v2/pools/gone", json={"uri": server.url, "weight": 0}).status_code
        assert pooled.patch("/v2/pools/mongo", json={"weight": 0}).status_code == 200
        assert pooled.put("/v2/queues/kept").status_code == 201
        for pool, weight in (("redis", 0), ("gone", 100)):
            assert pooled.patch(f"/v2/pools/{pool}", json={"weight": weight}).status_code == 200
        every_minute = {"every": 60, "message": {"body": "tick"}}
        assert pooled.put("/v2/queues/kept/schedules/s", json=every_minute).status_code == 201
        server.stop()
        # The fault happened: the pool's store refuses connections.
        with pytest.raises(redis.ConnectionError):
            server.client().ping()
        with dispatching(pooled) as dispatcher:
            pooled.clock.advance(ms=60_000)
            assert dispatcher.run_once() == 1
        claimed = pooled.post("/v2/queues/kept/claims", json={"ttl": 60, "grace": 60})
        assert [m["body"] for m in claimed.json["messages"]] == ["tick"]
        assert pooled.get("/v2/queues/kept/schedules/s").json["fires"] == 1
        assert pooled.service.stores.pool_of(PROJECT, "kept") == "redis"
    finally:
        server.stop()
