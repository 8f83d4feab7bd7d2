"""The API under falcon's test client: Zaqar's headers, shorthands, and the API on a store."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from typing import Any

import falcon.testing
import pytest

from tests.helpers.stores import close_test_driver, open_test_driver, store_url
from zaqar_delay.api.app import build
from zaqar_delay.clock import FakeClock
from zaqar_delay.conf import CatalogSettings, Settings, StorageSettings
from zaqar_delay.service import Service
from zaqar_delay.storage.base import Driver

PATCH_TYPE = "application/openstack-messaging-v2.0-json-patch"
HOOK = "http://127.0.0.1:9/hook"
PATCH_TTL = json.dumps([{"op": "replace", "path": "/metadata/_default_message_ttl", "value": 60}])

CLIENT_ID = "3381af92-2b9e-11e3-b191-71861300734c"


OTHER_CLIENT_ID = "9d1f1c8e-9d6f-4e3c-8d5c-6f8b2a3c4d5e"


PROJECT = "project-1"


HEADERS = {"Client-ID": CLIENT_ID, "X-Project-ID": PROJECT}


class Api:
    """falcon's TestClient with Zaqar's headers, a clock and shorthands."""

    def __init__(
        self,
        client: falcon.testing.TestClient,
        clock: FakeClock,
        driver: Driver,
        service: Service,
    ) -> None:
        self.client = client
        self.clock = clock
        self.driver = driver
        self.service = service

    def store(self, queue: str) -> Driver:
        """The store the queue lives on (with pooling: placed there first if new)."""
        return self.service.stores.place(PROJECT, queue)

    def request(self, method: str, path: str, **kwargs: Any) -> falcon.testing.Result:
        headers = {**HEADERS, **kwargs.pop("headers", {})}
        for name in [k for k, v in headers.items() if v is None]:
            del headers[name]
        return self.client.simulate_request(method, path, headers=headers, **kwargs)

    def get(self, path: str, **kwargs: Any) -> falcon.testing.Result:
        return self.request("GET", path, **kwargs)

    def put(self, path: str, **kwargs: Any) -> falcon.testing.Result:
        return self.request("PUT", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> falcon.testing.Result:
        return self.request("POST", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> falcon.testing.Result:
        return self.request("PATCH", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> falcon.testing.Result:
        return self.request("DELETE", path, **kwargs)

    def post_messages(self, queue: str, *messages: dict[str, Any], **kwargs: Any) -> list[str]:
        result = self.post(
            f"/v2/queues/{queue}/messages", json={"messages": list(messages)}, **kwargs
        )
        assert result.status_code == 201, result.text
        return [href.rsplit("/", 1)[1] for href in result.json["resources"]]


def store_post_size_limit(api: Api, queue: str, most: int | None) -> None:
    """Give ``queue`` a ``_max_messages_post_size`` of ``most`` (None: none) in its store, as
    a release that did not hold a queue to its schedules' needs could: the API refuses a limit
    below the message of one of the queue's schedules (``Schedules.check_policy``)."""
    store = api.store(queue)
    metadata = store.get_metadata(PROJECT, queue)
    assert metadata is not None, f"queue {queue} does not exist"
    changed = {k: v for k, v in metadata.items() if k != "_max_messages_post_size"}
    if most is not None:
        changed["_max_messages_post_size"] = most
    store.set_metadata(PROJECT, queue, changed)


def signed_headers(share: dict[str, Any]) -> dict[str, str]:
    """What python-zaqarclient's signed-url backend sends (no Client-ID of the creator)."""
    return {
        "URL-Signature": share["signature"],
        "URL-Expires": share["expires"],
        "URL-Methods": ",".join(share["methods"]),
        "URL-Paths": ",".join(share["paths"]),
        "X-Project-ID": share["project"],
        "Client-ID": "7c3f6a2e-6f5e-4b1a-9d8e-2b1c0a9f8e7d",
    }


def confirmation_headers(document: dict[str, Any]) -> dict[str, str]:
    """The headers a subscriber confirms with: the ``URL-*`` and ``X-Project-ID`` fields of
    its confirmation request as they are, as Zaqar's sample subscriber sends them."""
    names = ("URL-Signature", "URL-Expires", "URL-Methods", "URL-Paths", "X-Project-ID")
    return {**{name: document[name] for name in names}, "Client-ID": CLIENT_ID}


def settings_on(uri: str, **settings: Any) -> Settings:
    """Settings of a service on the store at ``uri``; ``settings``: fields of
    :class:`Settings` (an option group's settings, or a ``[DEFAULT]`` option), and the
    ``storage`` group's ``uri`` set to ``uri``."""
    storage = settings.pop("storage", StorageSettings())
    return Settings(storage=dataclasses.replace(storage, uri=uri), **settings)


# The API suite runs on the embedded Redis and on every other kind of store. The lane to run
# while working (tox -e fast) leaves the other stores to the gate, except in the modules marked
# ``store_paths``, whose tests take paths of the store's own (the contract suite holds every
# store to the rest).
API_STORES = [
    "embedded",
    *(
        pytest.param(store, marks=pytest.mark.other_store)
        for store in ("mongodb", "swift", "pooled")
    ),
]


def api_of(request: pytest.FixtureRequest, **settings: Any) -> Iterator[Api]:
    """The API on the store ``request.param`` names (one of ``API_STORES``), with extra
    settings (as :func:`settings_on` takes them)."""
    if request.param == "pooled":
        yield from pooled_api_on(request, **settings)
    else:
        yield from api_on(request, request.param, **settings)


def api_on(request: pytest.FixtureRequest, store: str, **settings: Any) -> Iterator[Api]:
    """The API on a fresh namespace of a ``store`` (conftest.STORES), with extra settings
    (fields of :class:`Settings`, as :func:`settings_on` takes them)."""
    clock = FakeClock()
    uri = store_url(request, store)
    driver = open_test_driver(uri, racing=True)  # API tests race requests
    app, service = build(settings_on(uri, **settings), driver=driver, clock=clock)
    yield Api(falcon.testing.TestClient(app), clock, driver, service)
    close_test_driver(driver)


def pooled_api_on(request: pytest.FixtureRequest, **settings: Any) -> Iterator[Api]:
    """The API with pooling on the embedded store (the catalog), and two pools registered
    through the admin API: "redis" on the redis-server and "mongo" on MongoDB, each on a
    namespace of its own, with equal weights."""
    clock = FakeClock()
    uri = store_url(request, "embedded")
    driver = open_test_driver(uri, racing=True)  # API tests race requests
    pooled = {"pooling": True, "admin_mode": True, "catalog": CatalogSettings(refresh=0.05)}
    app, service = build(settings_on(uri, **{**pooled, **settings}), driver=driver, clock=clock)
    api = Api(falcon.testing.TestClient(app), clock, driver, service)
    namespaces = {}
    for name, store, option in (
        ("redis", "redis-server", "key_prefix"),
        ("mongo", "mongodb", "database"),
    ):
        namespaces[name] = f"t{uuid.uuid4().hex[:12]}"
        document = {
            "uri": store_url(request, store),
            "weight": 100,
            "options": {option: namespaces[name]},
        }
        result = api.put(f"/v2/pools/{name}", json=document)
        assert result.status_code == 201, result.text
    yield api
    service.stores.close()
    for name, store, _ in (("redis", "redis-server", ""), ("mongo", "mongodb", "")):
        close_test_driver(open_test_driver(store_url(request, store), namespace=namespaces[name]))
    close_test_driver(driver)


def assert_error(
    result: falcon.testing.Result, status: int, title: str, description: str | None = None
) -> None:
    """An error response with Zaqar's JSON shape."""
    assert result.status_code == status, result.text
    assert result.json["title"] == title
    if description is not None:
        assert result.json["description"] == description


# Every route, as project B, aimed at project A's names and ids. Expected: what B sees.
SCHEDULE = {"cron": "0 3 * * *", "message": {"body": "b"}}


def other_project_calls(a: dict[str, Any]) -> list[tuple[str, str, dict[str, Any], set[int]]]:
    mid, cid, claimed = a["ids"][2], a["claim_id"], a["claimed"][0]
    sid = a["subscription_id"]
    confirm = {"json": {"confirmed": True}}
    ids = ",".join(a["ids"])
    return [
        ("GET", "/v2/queues", {}, {200}),
        ("GET", "/v2/queues/shared", {}, {200}),  # Zaqar: a missing queue shows the defaults
        ("PATCH", "/v2/queues/shared", {"body": PATCH_TTL, "headers": {"Content-Type": PATCH_TYPE}}, {404}),
        ("GET", "/v2/queues/shared/stats", {}, {200}),
        ("POST", "/v2/queues/shared/purge", {"json": {"resource_types": ["messages"]}}, {204, 404}),
        ("GET", f"/v2/queues/shared/messages?ids={ids}", {}, {404}),
        ("GET", "/v2/queues/shared/messages?echo=true&include_claimed=true", {}, {200}),
        ("GET", f"/v2/queues/shared/messages/{mid}", {}, {404}),
        ("PATCH", f"/v2/queues/shared/messages/{mid}", {"json": {"delay": 100}}, {404}),
        ("DELETE", f"/v2/queues/shared/messages/{mid}", {}, {204}),
        ("DELETE", f"/v2/queues/shared/messages/{claimed}?claim_id={cid}", {}, {204, 400}),
        ("DELETE", f"/v2/queues/shared/messages?ids={ids}", {}, {204}),
        ("DELETE", "/v2/queues/shared/messages?pop=2", {}, {200}),
        ("POST", "/v2/queues/shared/claims?limit=10", {"json": {"ttl": 60, "grace": 60}}, {204}),
        ("GET", f"/v2/queues/shared/claims/{cid}", {}, {404}),
        ("PATCH", f"/v2/queues/shared/claims/{cid}", {"json": {"ttl": 300}}, {404}),
        ("DELETE", f"/v2/queues/shared/claims/{cid}", {}, {204}),
        ("POST", "/v2/queues/shared/share", {"json": {}}, {403}),  # no signing key here
        ("GET", "/v2/queues/shared/subscriptions", {}, {200}),
        ("GET", f"/v2/queues/shared/subscriptions/{sid}", {}, {404}),
        ("PATCH", f"/v2/queues/shared/subscriptions/{sid}", {"json": {"ttl": 120}}, {404}),
        ("PUT", f"/v2/queues/shared/subscriptions/{sid}/confirm", confirm, {404}),
        ("DELETE", f"/v2/queues/shared/subscriptions/{sid}", {}, {204}),
        ("POST", "/v2/queues/shared/purge", {"json": {"resource_types": ["subscriptions"]}}, {204}),
        ("GET", "/v2/queues/shared/schedules", {}, {200}),
        ("GET", "/v2/queues/shared/schedules/nightly", {}, {404}),
        ("PATCH", "/v2/queues/shared/schedules/nightly", {"json": {"paused": True}}, {404}),
        ("POST", "/v2/queues/shared/schedules/nightly/run", {}, {404}),
        ("DELETE", "/v2/queues/shared/schedules/nightly", {}, {204}),
        # Last, since B then has a queue of that name: creating it and posting to it is B's.
        ("PUT", "/v2/queues/shared", {"json": {"_default_message_ttl": 60}}, {201}),
        ("POST", "/v2/queues/shared/messages", {"json": {"messages": [{"body": "b"}]}}, {201}),
        ("POST", "/v2/queues/shared/subscriptions", {"json": {"subscriber": HOOK}}, {201}),
        ("PUT", "/v2/queues/shared/schedules/nightly", {"json": SCHEDULE}, {201}),
        ("DELETE", "/v2/queues/shared", {}, {204}),
    ]  # fmt: skip
