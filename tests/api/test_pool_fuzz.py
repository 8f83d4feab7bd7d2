"""Property-based fuzz of the admin API's pools and flavors: whatever URI, options, weight and
flavor an operator sends to create or change a pool (hostile schemes, hosts, queries and
option values, or a real store's URI with hostile additions), whatever pool list a flavor
names and whatever ``_flavor`` a queue asks for, the answer is a 2xx or a 4xx with Zaqar's
error shape, never a 500, and a refused create or change writes nothing. URIs name only
loopback ports nothing listens on, the test's own stores, or no host at all."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given

from tests.helpers.api import Api, pooled_api_on
from tests.helpers.fuzz import FUZZ, assert_no_server_error, hostile_text, json_values
from tests.helpers.stores import store_url

JSON = {"Content-Type": "application/json"}
schemes = st.sampled_from(
    [
        "redis://",
        "rediss://",
        "unix://",
        "redis+cluster://",
        "mongodb://",
        "mongodb+srv://",
        "swift://",
        "redislite://",
        "file://",
        "",
    ]
)
hosts = st.sampled_from(
    [
        "127.0.0.1:1",
        "[::1]:1",
        "[::1",
        "localhost:1",
        "127.0.0.1:99999",
        "127.0.0.1:-1",
        "",
        "@",
        "u:p@127.0.0.1:1",
        "/tmp/x.sock",
        "127.0.0.1:1,127.0.0.1:2",
    ]
)
tails = (
    st.sampled_from(
        [
            "",
            "/",
            "/0",
            "/99",
            "/../../etc",
            "?socket_timeout=-1",
            "?db=x",
            "?ssl=true",
            "/v1.0?x=%ff",
        ]
    )
    | hostile_text
)
uris = st.builds(lambda *parts: "".join(parts), schemes, hosts, tails) | hostile_text | json_values
option_names = st.sampled_from(
    ["key_prefix", "database", "settle_ms", "replica_acks", "max_connections", "x"]
)
options = st.dictionaries(option_names | hostile_text, json_values | hostile_text, max_size=3)


@pytest.fixture
def api(request: pytest.FixtureRequest) -> Iterator[Api]:
    yield from pooled_api_on(request)


# A Redis database of the test's redis-server that no other test writes to.
FUZZ_REDIS_DB = 15


@pytest.fixture
def live_uris(request: pytest.FixtureRequest) -> list[str]:
    """The URIs of the test's own Redis and MongoDB, which a pool can really connect to: on a
    Redis database and a MongoDB database of the fuzz's own. A pool given no namespace option
    uses its store's default namespace, and one that holds a queue (another test's, left on
    the worker's store) keeps the pool from being deleted, rightly."""
    redis_uri = store_url(request, "redis-server").rsplit("/", 1)[0] + f"/{FUZZ_REDIS_DB}"
    database = f"fuzz{uuid.uuid4().hex[:12]}"
    mongodb_uri = request.getfixturevalue("secantus_server").database_url(database)
    return [redis_uri, mongodb_uri]


@FUZZ
@given(
    uri=uris,
    pool_options=options | json_values,
    weight=st.integers(-1, 2**70) | json_values,
    flavor=st.sampled_from([None, "f"]) | hostile_text | json_values,
    data=st.data(),
)
def test_no_pool_body_is_a_server_error(
    api: Api,
    live_uris: list[str],
    uri: Any,
    pool_options: Any,
    weight: Any,
    flavor: Any,
    data: st.DataObject,
) -> None:
    if data.draw(st.booleans()):  # a store that answers, with hostile additions
        uri, weight = data.draw(st.sampled_from(live_uris)) + data.draw(tails), 10
    document = {"uri": uri, "weight": weight, "options": pool_options, "flavor": flavor}
    created = api.put("/v2/pools/p1", body=json.dumps(document).encode(), headers=JSON)
    assert_no_server_error(created)
    before = api.get("/v2/pools/p1")
    assert before.status_code == (404 if created.status_code >= 400 else 200), before.text
    change = {"uri": uri, "options": pool_options}
    patched = api.patch("/v2/pools/p1", body=json.dumps(change).encode(), headers=JSON)
    assert_no_server_error(patched)
    after = api.get("/v2/pools/p1")
    assert_no_server_error(after)
    if patched.status_code >= 400:  # a refused change changes nothing
        assert (after.status_code, after.json) == (before.status_code, before.json)
    assert_no_server_error(api.get("/v2/pools", query_string="detailed=true"))
    assert api.delete("/v2/pools/p1").status_code == 204


PATCH = {"Content-Type": "application/openstack-messaging-v2.0-json-patch"}
# The fixture's pools, names of none, and hostile names.
pool_names = st.sampled_from(["redis", "mongo", "nope"]) | hostile_text | json_values
pool_lists = st.lists(pool_names, max_size=3) | st.sampled_from([["redis"], ["redis", "mongo"]])


@FUZZ
@given(
    pool_list=pool_lists | json_values,
    changed_list=pool_lists | json_values,
    flavor=st.sampled_from(["f1", "none"]) | pool_names,
    query=st.sampled_from(["", "detailed=true", "limit=0", "limit=-1", "marker=%ED%A0%80"]),
)
def test_no_flavor_body_or_queue_flavor_is_a_server_error(
    api: Api, pool_list: Any, changed_list: Any, flavor: Any, query: str
) -> None:
    """Flavors with hostile pool lists, and queues asking for hostile ``_flavor`` names (at
    creation, and patched in)."""
    created = api.put(
        "/v2/flavors/f1", body=json.dumps({"pool_list": pool_list}).encode(), headers=JSON
    )
    assert_no_server_error(created)
    before = api.get("/v2/flavors/f1")
    assert before.status_code == (404 if created.status_code >= 400 else 200), before.text
    change = json.dumps({"pool_list": changed_list}).encode()
    patched = api.patch("/v2/flavors/f1", body=change, headers=JSON)
    assert_no_server_error(patched)
    if patched.status_code >= 400:  # a refused change changes nothing
        after = api.get("/v2/flavors/f1")
        assert (after.status_code, after.json) == (before.status_code, before.json)
    assert_no_server_error(api.get("/v2/flavors", query_string=query))
    assert_no_server_error(api.get("/v2/pools", query_string=query))
    metadata = json.dumps({"_flavor": flavor}).encode()
    assert_no_server_error(api.put("/v2/queues/q", body=metadata, headers=JSON))
    patch = [{"op": "add", "path": "/metadata/_flavor", "value": flavor}]
    assert_no_server_error(
        api.patch("/v2/queues/q", body=json.dumps(patch).encode(), headers=PATCH)
    )
    assert api.delete("/v2/queues/q").status_code == 204
    if created.status_code == 201:
        assert api.delete("/v2/flavors/f1").status_code == 204
