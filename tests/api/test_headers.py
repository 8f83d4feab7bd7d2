"""Every request's checks: versions and home documents, headers, queue names, routing."""

from __future__ import annotations

import falcon.testing
import pytest

from testbed.processes import RedisServer
from tests.helpers.api import HEADERS, Api, assert_error
from zaqar_delay.api.app import create_app
from zaqar_delay.clock import FakeClock
from zaqar_delay.conf import Settings, StorageSettings
from zaqar_delay.stores import PooledStores


def test_versions_document_needs_no_headers(api: Api) -> None:
    result = api.client.simulate_get("/")
    assert result.status_code == 300
    [version] = result.json["versions"]
    assert version["id"] == "2" and version["links"] == [{"href": "/v2/", "rel": "self"}]
    assert result.headers["x-openstack-request-id"].startswith("req-")


def test_home_document(api: Api) -> None:
    result = api.get("/v2/")
    assert result.status_code == 200
    assert result.headers["content-type"] == "application/json-home"
    assert result.headers["cache-control"] == "max-age=86400"
    assert "rel/post_claim" in result.json["resources"]
    assert api.get("/v2").status_code == 404


def test_missing_client_id(api: Api) -> None:
    result = api.get("/v2/queues", headers={"Client-ID": None})
    assert_error(result, 400, "Missing header value", 'The "Client-Id" header is required.')


@pytest.mark.parametrize("value", ["", "not-a-uuid", "3381af92-2b9e-11e3-b191-71861300734"])
def test_malformed_client_id(api: Api, value: str) -> None:
    result = api.get("/v2/queues", headers={"Client-ID": value})
    assert_error(result, 400, "Wrong UUID value", "Malformed hexadecimal UUID.")


def test_dashless_client_id_is_the_same_client(api: Api) -> None:
    api.post_messages("q", {"body": 1}, headers={"Client-ID": "3381af922b9e11e3b19171861300734c"})
    result = api.get("/v2/queues/q/messages")
    assert result.json["messages"] == []  # echo=false hides it: same client as the dashed form


def test_project_header(api: Api) -> None:
    assert_error(
        api.get("/v2/queues", headers={"X-Project-ID": None}),
        400,
        "Project-Id Missing",
        "The header X-PROJECT-ID was missing",
    )
    assert_error(
        api.get("/v2/queues", headers={"X-Project-ID": ""}), 400, "Empty project header not allowed"
    )
    assert_error(
        api.get("/v2/queues", headers={"X-Project-ID": "p" * 257}),
        400,
        "Invalid queue identification",
    )
    assert api.get("/v2/queues", headers={"X-Project-ID": "p" * 256}).status_code == 200


@pytest.mark.parametrize("name", ["a" * 65, "bad name", "bad{brace}", "ümlaut", "a,b"])
def test_invalid_queue_names(api: Api, name: str) -> None:
    result = api.put(f"/v2/queues/{name}")
    assert_error(
        result,
        400,
        "Invalid queue identification",
        "The format of the submitted queue name or project id is not valid.",
    )


@pytest.mark.parametrize("name", ["a" * 64, "with.dot", "under_score-dash", "0"])
def test_valid_queue_names(api: Api, name: str) -> None:
    assert api.put(f"/v2/queues/{name}").status_code == 201


def test_urlencoded_body_is_refused(api: Api) -> None:
    result = api.post(
        "/v2/queues/q/messages",
        body="a=b",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert_error(result, 400, "Invalid Content-Type")


@pytest.mark.parametrize("accept", ["text/html", "application/xml", "image/png;q=0.5"])
def test_accept_must_allow_json_and_the_refusal_is_json_anyway(api: Api, accept: str) -> None:
    refused = api.get("/v2/queues", headers={"Accept": accept})
    assert_error(refused, 406, "406 Not Acceptable")
    assert refused.headers["content-type"] == "application/json"
    assert "application/json" in refused.json["description"]
    assert api.get("/v2/queues", headers={"Accept": "*/*"}).status_code == 200


def test_unknown_route_and_method(api: Api) -> None:
    # The admin API of pools and flavors is served only with pooling.
    pooled = isinstance(api.service.stores, PooledStores)
    assert api.get("/v2/pools").status_code == (200 if pooled else 404)
    assert api.get("/v2/flavors").status_code == (200 if pooled else 404)
    assert_error(api.get("/v2/nothing"), 404, "404 Not Found", "There is no resource at this path.")
    result = api.post("/v2/queues/q")
    assert_error(
        result, 405, "405 Method Not Allowed", "This resource does not answer this method."
    )
    assert "PUT" in result.headers["allow"]


def test_ping(api: Api) -> None:
    assert api.get("/v2/ping").status_code == 204
    assert api.request("HEAD", "/v2/ping").status_code == 204


def test_health_is_admin_only(api: Api) -> None:
    assert_error(api.get("/v2/health"), 403, "Not authorized")
    result = api.get("/v2/health", headers={"X-Roles": "member,admin"})
    assert result.status_code == 200
    assert result.json["storage_reachable"] is True
    status = result.json["operation_status"]
    # Zaqar's eight operations, in its order.
    assert list(status) == [
        "create_queue",
        "post_messages",
        "claim_messages",
        "list_messages",
        "delete_messages",
        "delete_claim",
        "bulk_delete_messages",
        "delete_queue",
    ]
    assert all(step["succeeded"] for step in status.values())
    # The durability in force: neither test store waits for replicas, so neither survives a
    # failover; both journal or fsync each write before answering.
    durability = result.json["durability"]
    assert durability["store"] in ("redis", "mongodb", "swift")
    assert durability["replica_acks"] == 0
    assert durability["survives"] == ["process crash", "power loss"]
    assert durability["facts"]
    # The throw-away queue is gone afterwards.
    assert (
        api.get("/v2/queues", headers={"X-Project-ID": "zaqar-delay-health"}).json["queues"] == []
    )


@pytest.mark.parametrize("value", ["true", "True", "TRUE", "1", "yes", "on"])
def test_boolean_spellings(api: Api, value: str) -> None:
    api.post_messages("q", {"body": 1})
    result = api.get("/v2/queues/q/messages", params={"echo": value})
    assert len(result.json["messages"]) == 1


def test_invalid_boolean(api: Api) -> None:
    result = api.get("/v2/queues/q/messages", params={"echo": "maybe"})
    assert_error(
        result,
        400,
        "Invalid parameter",
        'The "echo" parameter is invalid. The value of the parameter must be "true" or "false".',
    )


def test_storage_outage_is_503_and_recovers() -> None:
    """Stop the store mid-test: 503 with Zaqar's title, then success once it is back."""
    server = RedisServer().start()
    try:
        settings = Settings(storage=StorageSettings(uri=server.url, socket_timeout=1.0))
        client = falcon.testing.TestClient(create_app(settings, clock=FakeClock()), headers=HEADERS)
        assert (
            client.simulate_post(
                "/v2/queues/q/messages", json={"messages": [{"body": 1}]}
            ).status_code
            == 201
        )
        server.stop()
        assert_error(
            client.simulate_post("/v2/queues/q/claims"), 503, "Service temporarily unavailable"
        )
        assert client.simulate_get("/v2/ping").status_code == 503
        server.start()
        assert client.simulate_get("/v2/ping").status_code == 204
        assert (
            client.simulate_post("/v2/queues/q/claims").status_code == 204
        )  # data was not persisted
    finally:
        server.stop()
