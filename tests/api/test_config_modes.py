"""Options that change request rules: free-form client ids, claim ids on bulk delete."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator

import falcon.testing
import pytest

from tests.helpers.api import PROJECT, assert_error
from zaqar_delay.api.app import create_app
from zaqar_delay.clock import FakeClock
from zaqar_delay.conf import Limits, ServerSettings, Settings, StorageSettings
from zaqar_delay.storage.redis.connect import redis_client
from zaqar_delay.storage.redis.driver import RedisDriver
from zaqar_delay.storage.redis.embedded import EmbeddedRedis


@pytest.fixture
def make_client(embedded_redis: EmbeddedRedis) -> Iterator[object]:
    drivers: list[RedisDriver] = []

    def build(
        settings: dict[str, object] | None = None, **limits: object
    ) -> falcon.testing.TestClient:
        driver = RedisDriver(
            redis_client(embedded_redis.uri, 5.0), prefix=f"t{uuid.uuid4().hex[:12]}"
        )
        drivers.append(driver)
        configured = Settings(
            storage=StorageSettings(uri=embedded_redis.uri),
            limits=dataclasses.replace(Limits(), **limits),
            **(settings or {}),  # type: ignore[arg-type]
        )
        return falcon.testing.TestClient(create_app(configured, driver=driver, clock=FakeClock()))

    yield build
    for driver in drivers:
        driver.close()


@pytest.mark.parametrize(
    ("client_id", "ok"), [("a" * 9, False), ("a" * 10, True), ("a" * 36, True), ("a" * 37, False)]
)
def test_free_form_client_ids(make_client, client_id: str, ok: bool) -> None:  # type: ignore[no-untyped-def]
    client = make_client(client_id_uuid_safe="off")
    result = client.simulate_get(
        "/v2/queues", headers={"Client-ID": client_id, "X-Project-ID": PROJECT}
    )
    if ok:
        assert result.status_code == 200
    else:
        assert_error(result, 400, "Length of client id must be at least 10 and no greater than 36.")


def test_bulk_delete_requires_claim_ids_when_configured(make_client) -> None:  # type: ignore[no-untyped-def]
    client = make_client(message_delete_with_claim_id=True)
    headers = {"Client-ID": str(uuid.uuid4()), "X-Project-ID": PROJECT}
    posted = client.simulate_post(
        "/v2/queues/q/messages", json={"messages": [{"body": 1}]}, headers=headers
    )
    mid = posted.json["resources"][0].rsplit("/", 1)[1]
    claim = client.simulate_post("/v2/queues/q/claims", headers=headers)
    claim_id = claim.headers["location"].rsplit("/", 1)[1]
    assert_error(
        client.simulate_delete("/v2/queues/q/messages", query_string=f"ids={mid}", headers=headers),
        400,
        "Invalid API request",
    )
    assert_error(
        client.simulate_delete(
            "/v2/queues/q/messages", query_string=f"ids={mid}&claim_ids=other", headers=headers
        ),
        403,
        "Unable to delete",
    )
    deleted = client.simulate_delete(
        "/v2/queues/q/messages", query_string=f"ids={mid}&claim_ids={claim_id}", headers=headers
    )
    assert deleted.status_code == 204
    assert client.simulate_get(f"/v2/queues/q/messages/{mid}", headers=headers).status_code == 404


def test_marker_with_non_ascii_digits_lists_from_the_start(make_client) -> None:  # type: ignore[no-untyped-def]
    client = make_client()
    headers = {"Client-ID": str(uuid.uuid4()), "X-Project-ID": PROJECT}
    client.simulate_post("/v2/queues/q/messages", json={"messages": [{"body": 1}]}, headers=headers)
    result = client.simulate_get(
        "/v2/queues/q/messages", params={"marker": "٣", "echo": "true"}, headers=headers
    )
    assert result.status_code == 200
    assert [m["body"] for m in result.json["messages"]] == [1]


def test_default_project_for_requests_without_one(make_client) -> None:  # type: ignore[no-untyped-def]
    headers = {"Client-ID": str(uuid.uuid4())}
    # Zaqar's default: a request without a project is refused.
    assert_error(
        make_client().simulate_put("/v2/queues/q", headers=headers),
        400,
        "Project-Id Missing",
        "The header X-PROJECT-ID was missing",
    )
    client = make_client(settings={"server": ServerSettings(default_project="cli")})
    assert client.simulate_put("/v2/queues/q", headers=headers).status_code == 201
    listed = client.simulate_get("/v2/queues", headers={**headers, "X-Project-ID": "cli"})
    assert [q["name"] for q in listed.json["queues"]] == ["q"]
    # A request that names its project keeps it.
    other = client.simulate_get("/v2/queues", headers={**headers, "X-Project-ID": "other"})
    assert other.json["queues"] == []
