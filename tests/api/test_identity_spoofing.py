"""Under keystone, an identity is what a validated token says, never what a client's headers
claim: every identity header is removed before anything reads it, and a claimed signature is
verified before any policy rule runs (``api/auth.py``).

Each attack is first shown to work where the removal is not in the way (the headers as sent,
read by oslo.context and held to the route's rule, pass), then refused by the server.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from keystonemiddleware.auth_token import _request as ksm_request
from oslo_context import context

from tests.helpers.keystone import KEYSTONE_CONF
from tests.helpers.oslo import Deployment, details_of
from zaqar_delay.api.auth import IDENTITY_ENVIRON_KEYS, IDENTITY_HEADERS, environ_key
from zaqar_delay.api.authorization import keystone_authorizer
from zaqar_delay.conf import load_settings
from zaqar_delay.errors import Forbidden

CLIENT = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c"}
# What the probe sent: a made-up signature, and the admin role in the deprecated header.
SPOOFED = {"URL-Signature": "x", "X-Role": "admin", "X-Project-ID": "ops"}


def test_every_identity_header_keystonemiddleware_sets_or_oslo_context_reads_is_removed() -> None:
    removed_by_ksm = {
        environ_key(h) for h in ksm_request._AuthTokenRequest.blank("/")._all_auth_headers()
    }
    assert removed_by_ksm <= IDENTITY_ENVIRON_KEYS
    assert environ_key("OpenStack-System-Scope") in IDENTITY_ENVIRON_KEYS
    credentials = {"auth_token", "service_token", "request_id", "global_request_id"}
    read_by_oslo = {
        key
        for name, keys in context._ENVIRON_HEADERS.items()
        if name not in credentials
        for key in keys
    }
    read_by_oslo |= {
        "HTTP_X_ROLES",
        "HTTP_X_ROLE",
        "HTTP_X_SERVICE_ROLES",
        "HTTP_X_IS_ADMIN_PROJECT",
    }
    assert read_by_oslo <= IDENTITY_ENVIRON_KEYS
    assert len(IDENTITY_HEADERS) == len(IDENTITY_ENVIRON_KEYS)


def spoofed_environ() -> dict[str, Any]:
    return {environ_key(name): value for name, value in SPOOFED.items()}


def test_the_spoofed_headers_would_pass_the_admin_rules_if_they_were_read(tmp_path: Any) -> None:
    # Where the removal is not in the way: oslo.context reads X-Role, and the rules of
    # /metrics and the detailed healthcheck allow the admin it describes.
    conf = tmp_path / "keystone.conf"
    conf.write_text(KEYSTONE_CONF)
    authorizer = keystone_authorizer(load_settings([str(conf)]))
    environ = spoofed_environ()
    assert context.RequestContext.from_environ(environ).roles == ["admin"]
    authorizer.authorize_rule("metrics:get", environ, "")
    authorizer.authorize_rule("health:get", environ, "ops")
    with pytest.raises(Forbidden):
        authorizer.authorize_rule("metrics:get", {}, "")


def test_metrics_refuse_a_made_up_signature_and_role(
    deploy: Callable[[str], Deployment],
) -> None:
    keystone = deploy(KEYSTONE_CONF + "[signed_url]\nsecret_key = k\n")
    member = keystone.token("member")
    posted = keystone.client.simulate_post(
        "/v2/queues/tenant-secret/messages",
        headers={**CLIENT, "X-Auth-Token": member},
        json={"messages": [{"body": 1}]},
    )
    assert posted.status_code == 201, posted.text
    for headers in (SPOOFED, {**SPOOFED, "X-Roles": "admin"}, {"X-Role": "admin"}):
        refused = keystone.get("/metrics", headers=headers)
        assert refused.status_code in (401, 404), (headers, refused.status_code)
        assert "tenant-secret" not in refused.text
    # A signature is refused on the API's routes too before its rule runs.
    signed = keystone.get("/v2/health", headers={**CLIENT, **SPOOFED})
    assert signed.status_code == 404
    assert signed.json["description"] == "The pre-signed URL does not allow this request."
    # With a token, the token's roles decide, whatever the headers claim.
    spoofing_member = keystone.get("/metrics", headers={"X-Auth-Token": member, "X-Role": "admin"})
    assert spoofing_member.status_code == 403
    admin = keystone.get("/metrics", headers={"X-Auth-Token": keystone.token("admin")})
    assert admin.status_code == 200 and "tenant-secret" in admin.text


def test_detailed_healthcheck_refuses_a_junk_token_with_a_made_up_signature_and_role(
    deploy: Callable[[str], Deployment],
) -> None:
    keystone = deploy(KEYSTONE_CONF)
    accept = {"Accept": "application/json"}
    attack = {**accept, "X-Auth-Token": "junk", **SPOOFED}
    refused = keystone.get("/healthcheck", headers=attack)
    assert refused.status_code == 404
    assert "python_version" not in refused.text and "threads" not in refused.text
    # Without a token, the spoofed role (with or without a signature) shows the plain form.
    plain = details_of(keystone.get("/healthcheck", headers={**accept, "X-Role": "admin"}))
    assert "python_version" not in json.dumps(plain)
    assert keystone.get("/healthcheck", headers={**accept, **SPOOFED}).status_code == 404
    # The plain form stays public; the details are an admin token's.
    assert keystone.get("/healthcheck").status_code == 200
    admin = {**accept, "X-Auth-Token": keystone.token("admin")}
    assert details_of(keystone.get("/healthcheck", headers=admin))["detailed"] is True
    member = {**accept, "X-Auth-Token": keystone.token("member"), "X-Role": "admin"}
    assert "python_version" not in json.dumps(
        details_of(keystone.get("/healthcheck", headers=member))
    )
