"""Policy under keystone: every rule, with a persona it allows and one it refuses.

Personas are tokens of keystone's bootstrap roles (``Keystone.token`` adds the implied ones:
admin implies member, member implies reader) and of a role no default names (``observer``).
keystonemiddleware is real; tokens come from its AuthTokenFixture.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.api import signed_headers
from tests.helpers.keystone import Keystone, keystone_app
from zaqar_delay.api import policies
from zaqar_delay.api.routes import ROUTES
from zaqar_delay.storage.redis.embedded import EmbeddedRedis

PROJECT = "p1"
POOLED = "[DEFAULT]\npooling = true\n[signed_url]\nsecret_key = k\n"

# Who each default allows, and a persona it refuses.
ALLOWED_AND_REFUSED = {
    policies.READER: ("reader", "observer"),
    policies.MEMBER: ("member", "reader"),
    policies.ADMIN: ("admin", "member"),
}

# A body each write accepts (a refusal must come from the policy, not from validation).
BODIES: dict[str, Any] = {
    "queues:create": {},
    "queues:update": [{"op": "add", "path": "/metadata/k", "value": 1}],
    "queues:share": {},
    "queues:purge": {"resource_types": ["messages"]},
    "messages:create": {"messages": [{"body": 1}]},
    "messages:update": {"ttl": 300},
    "claims:create": {"ttl": 60, "grace": 60},
    "claims:update": {"ttl": 60},
    "subscription:create": {"subscriber": "http://203.0.113.9/hook", "ttl": 3600},
    "subscription:update": {"ttl": 600},
    "subscription:confirm": {"confirmed": True},
    "pools:create": {"uri": "redis://127.0.0.1:1", "weight": 1},
    "pools:update": {"weight": 2},
    "flavors:create": {"pool_list": ["nope"]},
    "flavors:update": {"pool_list": ["nope"]},
}
PATCH_TYPES = {"queues:update": "application/openstack-messaging-v2.0-json-patch"}


def concrete(path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: "q" if m.group(1) == "queue_name" else "x", path)


def rule_cases() -> list[tuple[str, str, str, str]]:
    """(rule, method, path, default check) for every operation of every rule."""
    return [
        (rule.name, op["method"], op["path"], rule.check_str)
        for rule in policies.RULES
        for op in rule.operations
    ]


@pytest.fixture
def pooled(tmp_path: Path, embedded_redis: EmbeddedRedis) -> Iterator[Keystone]:
    """With pooling on, so that the pools and flavors routes answer (no pool registered)."""
    for keystone, _ in keystone_app(tmp_path, embedded_redis, POOLED):
        yield keystone


@pytest.fixture
def deployment(tmp_path: Path, embedded_redis: EmbeddedRedis) -> Iterator[Keystone]:
    for keystone, _ in keystone_app(tmp_path, embedded_redis, "[signed_url]\nsecret_key = k\n"):
        yield keystone


def call_as(keystone: Keystone, role: str, rule: str, method: str, path: str) -> Any:
    headers = {}
    if rule in PATCH_TYPES:
        headers["Content-Type"] = PATCH_TYPES[rule]
    return keystone.call(
        method,
        concrete(path) + ("?ids=x" if rule == "messages:delete_all" else ""),
        token=keystone.token(PROJECT, role),
        json=BODIES.get(rule) if method in ("PUT", "POST", "PATCH") else None,
        headers=headers,
    )


@pytest.mark.parametrize(
    ("rule", "method", "path", "check"), rule_cases(), ids=[c[0] for c in rule_cases()]
)
def test_each_rule_allows_its_persona_and_refuses_the_one_below(
    pooled: Keystone, rule: str, method: str, path: str, check: str
) -> None:
    allowed_role, refused_role = ALLOWED_AND_REFUSED[check]
    refused = call_as(pooled, refused_role, rule, method, path)
    assert refused.status_code == 403, (rule, refused_role, refused.text)
    assert refused.json["title"] == "Not authorized"
    allowed = call_as(pooled, allowed_role, rule, method, path)
    # Past the policy: whatever the resource answers, it is not a refusal of the caller.
    assert allowed.status_code not in (401, 403), (rule, allowed_role, allowed.text)


def test_a_reader_reads_a_member_writes_and_a_refused_write_changes_nothing(
    deployment: Keystone,
) -> None:
    reader = deployment.token(PROJECT, "reader")
    member = deployment.token(PROJECT, "member")
    post = {"messages": [{"body": "b"}]}
    # The hole this closes: a reader-only token posted and claimed.
    for method, path, body in (
        ("PUT", "/v2/queues/q", {}),
        ("POST", "/v2/queues/q/messages", post),
        ("POST", "/v2/queues/q/claims", {"ttl": 60}),
    ):
        assert deployment.call(method, path, token=reader, json=body).status_code == 403
    assert deployment.call("GET", "/v2/queues", token=reader).json["queues"] == []
    assert (
        deployment.call("POST", "/v2/queues/q/messages", token=member, json=post).status_code == 201
    )
    listed = deployment.call("GET", "/v2/queues/q/messages?echo=true", token=reader)
    assert [m["body"] for m in listed.json["messages"]] == ["b"]
    assert deployment.call("POST", "/v2/queues/q/claims", token=reader, json={}).status_code == 403
    stats = deployment.call("GET", "/v2/queues/q/stats", token=reader).json["messages"]
    assert stats["free"] == 1 and stats["claimed"] == 0


def test_a_pre_signed_url_is_authorised_by_its_signature(deployment: Keystone) -> None:
    member = deployment.token(PROJECT, "member")
    body = {"messages": [{"body": 1}]}
    deployment.call("POST", "/v2/queues/q/messages", token=member, json=body)
    share = deployment.call("POST", "/v2/queues/q/share", token=member, json={}).json
    signed = signed_headers(share)
    got = deployment.call("GET", "/v2/queues/q/messages?echo=true", headers=signed)
    assert got.status_code == 200, got.text
    # It grants what it names only: POST was not among its methods.
    assert (
        deployment.call("POST", "/v2/queues/q/messages", headers=signed, json=body).status_code
        == 404
    )


def write_policy(path: Path, text: str) -> None:
    """Write the policy file with a later mtime than it had (reloads are decided by mtime)."""
    before = path.stat().st_mtime if path.exists() else 0.0
    path.write_text(text)
    later = max(time.time(), before + 2)
    os.utime(path, (later, later))


@pytest.fixture
def tuned(tmp_path: Path, embedded_redis: EmbeddedRedis) -> Iterator[tuple[Keystone, Path]]:
    policy_file = tmp_path / "policy.yaml"
    write_policy(policy_file, '"messages:create": "role:poster"\n')
    extra = f"[oslo_policy]\npolicy_file = {policy_file}\n"
    for keystone, _ in keystone_app(tmp_path, embedded_redis, extra):
        yield keystone, policy_file


def test_a_policy_file_overrides_a_default_and_is_read_again_when_it_changes(
    tuned: tuple[Keystone, Path],
) -> None:
    keystone, policy_file = tuned
    post = {"messages": [{"body": 1}]}
    member, poster = keystone.token(PROJECT, "member"), keystone.token(PROJECT, "poster")
    assert (
        keystone.call("POST", "/v2/queues/q/messages", token=member, json=post).status_code == 403
    )
    assert (
        keystone.call("POST", "/v2/queues/q/messages", token=poster, json=post).status_code == 201
    )
    # Rules the file does not name keep their defaults.
    assert keystone.call("GET", "/v2/queues", token=poster).status_code == 403
    write_policy(policy_file, '"messages:create": "role:member"\n')
    assert (
        keystone.call("POST", "/v2/queues/q/messages", token=member, json=post).status_code == 201
    )
    assert (
        keystone.call("POST", "/v2/queues/q/messages", token=poster, json=post).status_code == 403
    )


@pytest.fixture
def zaqar_defaults(tmp_path: Path, embedded_redis: EmbeddedRedis) -> Iterator[Keystone]:
    extra = "[oslo_policy]\nenforce_new_defaults = false\n"
    for keystone, _ in keystone_app(tmp_path, embedded_redis, extra):
        yield keystone


def test_without_the_new_defaults_zaqars_defaults_still_allow(zaqar_defaults: Keystone) -> None:
    # With the new defaults a role no default names is refused everything (the rule cases
    # above); Zaqar's defaults (the deprecated rules) let any role of the project post, as
    # before an upgrade, and still keep health for admins.
    post = {"messages": [{"body": 1}]}
    observer = zaqar_defaults.token(PROJECT, "observer")
    answer = zaqar_defaults.call("POST", "/v2/queues/q/messages", token=observer, json=post)
    assert answer.status_code == 201, answer.text
    claimed = zaqar_defaults.call("POST", "/v2/queues/q/claims", token=observer, json={})
    assert claimed.status_code == 201, claimed.text
    assert zaqar_defaults.call("GET", "/v2/health", token=observer).status_code == 403


def test_every_route_but_the_public_documents_has_a_rule() -> None:
    unguarded = [
        (method, route.template)
        for route in ROUTES
        for method in sorted(route.methods())
        if policies.rule_of(method, route.template) is None
    ]
    assert unguarded == [("GET", "/"), ("GET", "/openapi.json")]
    # No rule names an operation no route answers.
    answered = {(m, r.template) for r in ROUTES for m in r.methods()}
    assert set(policies.RULE_OF) <= answered


# Zaqar 23.0.1's rule names (zaqar/common/policies).
ZAQAR_RULES = {
    *(f"queues:{a}" for a in ("get_all", "create", "get", "delete", "update", "stats", "share")),
    "queues:purge",
    *(f"topics:{a}" for a in ("get_all", "create", "get", "delete", "update", "stats", "purge")),
    *(f"messages:{a}" for a in ("get_all", "create", "get", "delete", "delete_all")),
    *(f"claims:{a}" for a in ("create", "get", "delete", "update")),
    *(f"subscription:{a}" for a in ("get_all", "create", "get", "delete", "update", "confirm")),
    *(f"pools:{a}" for a in ("get_all", "create", "get", "delete", "update")),
    *(f"flavors:{a}" for a in ("get_all", "create", "get", "delete", "update")),
    "ping:get",
    "health:get",
}


def test_zaqars_rule_names_keep_their_meaning() -> None:
    names = {rule.name for rule in policies.RULES}
    assert names >= ZAQAR_RULES
    for rule in policies.RULES:
        assert rule.scope_types == ["project"], rule.name
        if rule.name in ZAQAR_RULES and rule.check_str != policies.ZAQAR_ADMIN:
            # Zaqar left it open: its default is the deprecated rule.
            assert rule.deprecated_rule is not None, rule.name
            assert rule.deprecated_rule.check_str == policies.ZAQAR_OPEN


def generated(tool: str, cwd: Path) -> str:
    """What an oslo.policy generator beside this Python prints for the namespace."""
    return subprocess.run(
        [str(Path(sys.executable).with_name(tool)), "--namespace", "zaqar_delay"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=cwd,
    ).stdout


def test_the_oslo_policy_generators_know_the_namespace(tmp_path: Path) -> None:
    sample = generated("oslopolicy-sample-generator", tmp_path)
    assert '#"messages:create": "role:member and project_id:%(project_id)s"' in sample
    assert sample.count("# Intended scope(s): project") == len(policies.RULES)
    effective = generated("oslopolicy-policy-generator", tmp_path)
    assert '"pools:create": "role:admin"' in effective
    assert '"queues:get_all": "role:reader and project_id:%(project_id)s"' in effective


def test_noauth_is_unchanged_by_the_policy(api: Any) -> None:
    # No roles at all: noauth trusts its callers, as before.
    posted = api.post("/v2/queues/q/messages", json={"messages": [{"body": 1}]})
    assert posted.status_code == 201, posted.text
    assert api.post("/v2/queues/q/claims", json={}).status_code == 201
