"""auth_strategy = keystone: keystonemiddleware's auth_token in front of the API.

Token validation is replaced by keystonemiddleware's own AuthTokenFixture (it answers for the
tokens a test registers); everything else, the middleware included, is real.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.processes import RedisServer
from tests.helpers.api import signed_headers
from tests.helpers.keystone import Keystone, keystone_app
from zaqar_delay.api.routes import ROUTES, Route
from zaqar_delay.storage.redis.embedded import EmbeddedRedis


@pytest.fixture
def keystone(tmp_path: Path, embedded_redis: EmbeddedRedis) -> Iterator[Keystone]:
    for keystone, _ in keystone_app(tmp_path, embedded_redis, "[signed_url]\nsecret_key = k\n"):
        yield keystone


def test_requests_without_a_valid_token_are_refused(keystone: Keystone) -> None:
    assert keystone.call("GET", "/v2/queues").status_code == 401
    assert keystone.call("GET", "/v2/queues", token="not-a-token").status_code == 401
    assert keystone.call("GET", "/v2/queues", token=keystone.token("p1")).status_code == 200


def test_public_documents_need_no_token(keystone: Keystone) -> None:
    assert keystone.call("GET", "/").status_code == 300
    assert keystone.call("GET", "/openapi.json").status_code == 200


@pytest.mark.parametrize(
    ("method", "route"),
    [(method, route) for route in ROUTES for method in sorted(route.methods())],
    ids=lambda value: value if isinstance(value, str) else value.template,
)
def test_only_the_routes_marked_tokenless_answer_without_a_token(
    keystone: Keystone, method: str, route: Route
) -> None:
    path = re.sub(r"\{(\w+)\}", "x", route.template)
    answered = keystone.call(method, path, headers={"X-Project-ID": "p1"})
    if route.tokenless:
        assert answered.status_code != 401, (method, path)
    else:
        assert answered.status_code == 401, (method, path, answered.status_code)


def test_metrics_need_a_token_with_the_admin_role(keystone: Keystone) -> None:
    tenant = keystone.token("tenant-secret")
    keystone.call("POST", "/v2/queues/q/messages", token=tenant, json={"messages": [{"body": 1}]})
    # Its labels name projects and queues: no token, no metrics.
    assert keystone.call("GET", "/metrics", headers={"X-Roles": "admin"}).status_code == 401
    member = keystone.token("p1", "member")
    refused = keystone.call("GET", "/metrics", token=member, headers={"X-Roles": "admin"})
    assert refused.status_code == 403
    assert "tenant-secret" not in refused.text
    allowed = keystone.call("GET", "/metrics", token=keystone.token("ops", "admin"))
    assert allowed.status_code == 200
    assert 'project="tenant-secret"' in allowed.text


def test_the_project_comes_from_the_token_not_the_header(keystone: Keystone) -> None:
    alice, bob = keystone.token("alice"), keystone.token("bob")
    spoofed = {"X-Project-ID": "bob"}
    created = keystone.call("PUT", "/v2/queues/mine", token=alice, headers=spoofed, json={})
    assert created.status_code == 201
    listed = keystone.call("GET", "/v2/queues", token=bob).json["queues"]
    assert listed == []
    mine = keystone.call("GET", "/v2/queues", token=alice).json["queues"]
    assert [q["name"] for q in mine] == ["mine"]


def test_admin_routes_need_the_admin_role_in_the_token(keystone: Keystone) -> None:
    member = keystone.token("p1", "member")
    admin = keystone.token("p1", "admin")
    claims_admin = {"X-Roles": "admin"}
    assert keystone.call("GET", "/v2/health", token=member, headers=claims_admin).status_code == 403
    assert keystone.call("GET", "/v2/health", token=admin).status_code == 200


def test_pre_signed_urls_work_without_a_token_and_grant_no_roles(keystone: Keystone) -> None:
    owner = keystone.token("p1")
    keystone.call("POST", "/v2/queues/q/messages", token=owner, json={"messages": [{"body": 1}]})
    share = keystone.call("POST", "/v2/queues/q/share", token=owner, json={}).json
    signed = {**signed_headers(share), "X-Roles": "admin"}
    got = keystone.call("GET", "/v2/queues/q/messages?echo=true", headers=signed)
    assert got.status_code == 200
    assert [m["body"] for m in got.json["messages"]] == [1]
    forged = {**signed, "X-Project-ID": "p2"}
    assert keystone.call("GET", "/v2/queues/q/messages", headers=forged).status_code == 404
    outside = keystone.call("GET", "/v2/health", headers=signed)
    assert outside.status_code == 404


@pytest.fixture
def pooled_keystone(
    tmp_path: Path, embedded_redis: EmbeddedRedis, redis_server: RedisServer
) -> Iterator[tuple[Keystone, str]]:
    """Keystone with pooling on (and no admin_mode): the catalog on the embedded store; the
    second value is the URI of a redis-server to register as a pool."""
    for keystone, _ in keystone_app(tmp_path, embedded_redis, "[DEFAULT]\npooling = true\n"):
        yield keystone, redis_server.url


def test_pools_and_flavors_need_the_admin_role(pooled_keystone: tuple[Keystone, str]) -> None:
    keystone, uri = pooled_keystone
    pool = {"uri": uri, "weight": 10, "options": {"key_prefix": f"t{uuid.uuid4().hex[:12]}"}}
    flavor = {"pool_list": ["p1"]}
    member = keystone.token("tenant", "member", "reader")
    for method, path, body in (
        ("PUT", "/v2/pools/p1", pool),
        ("GET", "/v2/pools", None),
        ("PUT", "/v2/flavors/f1", flavor),
        ("GET", "/v2/flavors", None),
    ):
        tokenless = keystone.call(method, path, json=body, headers={"X-Project-ID": "tenant"})
        assert tokenless.status_code == 401, (method, path)
        refused = keystone.call(method, path, token=member, json=body)
        assert refused.status_code == 403, (method, path, refused.text)
        # Claiming the role in a header does not help: roles come from the token.
        spoofed = keystone.call(method, path, token=member, json=body, headers={"X-Roles": "admin"})
        assert spoofed.status_code == 403, (method, path)
    admin = keystone.token("ops", "admin")
    assert keystone.call("PUT", "/v2/pools/p1", token=admin, json=pool).status_code == 201
    assert keystone.call("PUT", "/v2/flavors/f1", token=admin, json=flavor).status_code == 201
    listed = keystone.call("GET", "/v2/pools", token=admin)
    assert [p["name"] for p in listed.json["pools"]] == ["p1"]
    assert keystone.call("GET", "/v2/flavors/f1", token=admin).json["pool_list"] == ["p1"]
    # A member's queue of the flavor is placed on the admin's pool.
    created = keystone.call("PUT", "/v2/queues/q1", token=member, json={"_flavor": "f1"})
    assert created.status_code == 201, created.text
    assert keystone.call("DELETE", "/v2/flavors/f1", token=member).status_code == 403
    assert keystone.call("DELETE", "/v2/flavors/f1", token=admin).status_code == 204
    # The pool holds the member's queue: deleting it is refused even to the admin.
    assert keystone.call("DELETE", "/v2/pools/p1", token=admin).status_code == 409
    assert keystone.call("DELETE", "/v2/queues/q1", token=member).status_code == 204
    assert keystone.call("DELETE", "/v2/pools/p1", token=admin).status_code == 204
