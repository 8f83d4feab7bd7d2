"""auth_strategy = keystone: keystonemiddleware's auth_token in front of the API.

Token validation is replaced by keystonemiddleware's own AuthTokenFixture (it answers for the
tokens a test registers); everything else, the middleware included, is real.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import falcon.testing
import pytest
from keystonemiddleware.fixture import AuthTokenFixture

from tests.api.conftest import signed_headers
from tests.conftest import close_test_driver, open_test_driver
from tests.processes import RedisServer
from zaqar_delay.api.app import build
from zaqar_delay.api.auth import protect
from zaqar_delay.api.routes import ROUTES, Route
from zaqar_delay.clock import FakeClock
from zaqar_delay.conf import load_settings
from zaqar_delay.service import Service
from zaqar_delay.storage.redis.embedded import EmbeddedRedis

CLIENT = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c"}
IMPLIED_ROLES = {"admin": ("member",), "member": ("reader",)}


class Keystone:
    def __init__(self, client: falcon.testing.TestClient, tokens: AuthTokenFixture) -> None:
        self.client = client
        self.tokens = tokens

    def token(self, project: str, *roles: str) -> str:
        """A token of ``project`` with ``roles`` (default: member) and the roles they imply,
        as keystone's bootstrap roles do (admin implies member, member implies reader)."""
        token_id = uuid.uuid4().hex
        granted = list(roles) or ["member"]
        for role in granted:
            granted.extend(r for r in IMPLIED_ROLES.get(role, ()) if r not in granted)
        self.tokens.add_token_data(
            token_id=token_id,
            project_id=project,
            user_id="u-" + project,
            role_list=granted,
        )
        return token_id

    def call(
        self,
        method: str,
        path: str,
        token: str | None = None,
        headers: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> falcon.testing.Result:
        headers = {**CLIENT, **(headers or {})}
        if token is not None:
            headers["X-Auth-Token"] = token
        return self.client.simulate_request(method, path, headers=headers, **kwargs)


KEYSTONE_CONF = (
    "[server]\nauth_strategy = keystone\n"
    "[keystone_authtoken]\nwww_authenticate_uri = http://127.0.0.1:5000/v3\n"
    "delay_auth_decision = false\n"
)


def keystone_app(
    tmp_path: Path, embedded_redis: EmbeddedRedis, extra_conf: str
) -> Iterator[tuple[Keystone, Service]]:
    """The app behind keystonemiddleware on the embedded store, with ``extra_conf``, and the
    service it serves."""
    conf = tmp_path / "zaqar-delay.conf"
    conf.write_text(KEYSTONE_CONF + extra_conf)
    settings = load_settings([str(conf)])
    driver = open_test_driver(str(embedded_redis.uri))
    tokens = AuthTokenFixture()
    tokens.setUp()
    clock = FakeClock()
    app, service = build(settings, driver=driver, clock=clock)
    try:
        yield Keystone(falcon.testing.TestClient(protect(app, settings, clock)), tokens), service
    finally:
        tokens.cleanUp()
        service.stores.close()
        close_test_driver(driver)


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
