"""oslo.middleware around the API (``api/oslo_stack.py``): request ids, ``/healthcheck``,
CORS and proxy headers, on the WSGI app servers run (``create_wsgi_app``), with and without
keystone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import falcon.testing

from tests.helpers.keystone import KEYSTONE_CONF
from tests.helpers.oslo import HEADERS, Deployment, details_of
from zaqar_delay.api.oslo_stack import with_oslo_middleware
from zaqar_delay.conf import load_settings

REQUEST_ID = re.compile(r"^req-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
DASHBOARD_ORIGIN = "https://dashboard.example.com"


# -- request ids -------------------------------------------------------------------------------


def test_every_response_carries_one_request_id(deploy: Callable[[str], Deployment]) -> None:
    noauth = deploy("")
    answers = [
        noauth.get("/v2/queues", headers=HEADERS),  # 200
        noauth.get("/v2/queues/q/claims/x", headers=HEADERS),  # 404
        noauth.get("/v2/queues", headers={"X-Project-ID": "p1"}),  # 400: no Client-ID
    ]
    assert [a.status_code for a in answers] == [200, 404, 400]
    ids = []
    for answer in answers:
        values = [v for k, v in answer.headers.items() if k.lower() == "x-openstack-request-id"]
        assert len(values) == 1 and REQUEST_ID.match(values[0]), answer.headers
        ids.append(values[0])
    assert len(set(ids)) == 3


def test_a_refusal_by_keystonemiddleware_carries_a_request_id_too(
    deploy: Callable[[str], Deployment],
) -> None:
    keystone = deploy(KEYSTONE_CONF)
    refused = keystone.get("/v2/queues", headers=HEADERS)
    # Answered by keystonemiddleware, before the API ran.
    assert refused.status_code == 401
    assert "requires authentication" in refused.text
    assert REQUEST_ID.match(refused.headers["x-openstack-request-id"])


def test_a_location_stays_relative_as_zaqars(deploy: Callable[[str], Deployment]) -> None:
    noauth = deploy("")
    created = noauth.client.simulate_put("/v2/queues/q", headers=HEADERS, json={})
    assert created.status_code == 201
    assert created.headers["Location"] == "/v2/queues/q"


# -- /healthcheck ------------------------------------------------------------------------------


def test_healthcheck_needs_no_headers_and_shows_details_to_admins_only(
    deploy: Callable[[str], Deployment],
) -> None:
    noauth = deploy("")
    # Answered by the healthcheck, not the API (which would want Client-ID and a project).
    probe = noauth.get("/healthcheck")
    assert probe.status_code == 200 and probe.headers["content-type"].startswith("text/plain")
    accept = {"Accept": "application/json"}
    plain = details_of(noauth.get("/healthcheck", headers=accept))
    assert "detailed" not in plain or not plain["detailed"]
    assert "python_version" not in json.dumps(plain)
    detailed = details_of(noauth.get("/healthcheck", headers={**accept, "X-Roles": "admin"}))
    assert detailed["detailed"] is True and "python_version" in json.dumps(detailed)


def test_under_keystone_healthcheck_needs_no_token_and_details_need_health_get(
    deploy: Callable[[str], Deployment],
) -> None:
    keystone = deploy(KEYSTONE_CONF)
    accept = {"Accept": "application/json"}
    # No token: the load balancer's probe answers, without details.
    assert keystone.get("/healthcheck").status_code == 200
    # A role claimed in a header grants nothing.
    claimed = details_of(keystone.get("/healthcheck", headers={**accept, "X-Roles": "admin"}))
    assert "python_version" not in json.dumps(claimed)
    member = {**accept, "X-Auth-Token": keystone.token("member")}
    assert "python_version" not in json.dumps(
        details_of(keystone.get("/healthcheck", headers=member))
    )
    admin = {**accept, "X-Auth-Token": keystone.token("admin")}
    assert details_of(keystone.get("/healthcheck", headers=admin))["detailed"] is True
    assert keystone.get("/healthcheck", headers={"X-Auth-Token": "forged"}).status_code == 401


def test_a_disable_file_drains_the_server(
    deploy: Callable[[str], Deployment], tmp_path: Path
) -> None:
    flag = tmp_path / "drain"
    noauth = deploy(f"[healthcheck]\nbackends = disable_by_file\ndisable_by_file_path = {flag}\n")
    assert noauth.get("/healthcheck").status_code == 200
    flag.touch()
    drained = noauth.get("/healthcheck")
    assert drained.status_code == 503, drained.text
    # The API itself still answers: only the balancer is told to stop sending.
    assert noauth.get("/v2/queues", headers=HEADERS).status_code == 200


# -- CORS --------------------------------------------------------------------------------------


def test_cors_answers_the_dashboards_origin_only(deploy: Callable[[str], Deployment]) -> None:
    keystone = deploy(KEYSTONE_CONF + f"[cors]\nallowed_origin = {DASHBOARD_ORIGIN}\n")
    preflight = {
        "Origin": DASHBOARD_ORIGIN,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "X-Auth-Token,Client-ID,Content-Type",
    }
    # A preflight carries no token: answered before authentication.
    status, headers = keystone.preflight("/v2/queues/q/messages", preflight)
    assert status.startswith("200"), status
    assert headers["Access-Control-Allow-Origin"] == DASHBOARD_ORIGIN
    allowed = headers["Access-Control-Allow-Headers"].lower()
    assert {"x-auth-token", "client-id", "content-type"} <= set(allowed.split(","))
    elsewhere = {**preflight, "Origin": "https://attacker.example.net"}
    _, refused = keystone.preflight("/v2/queues/q/messages", elsewhere)
    assert "Access-Control-Allow-Origin" not in refused
    # A real request from the dashboard's origin may read the request id.
    token = keystone.token("reader")
    got = keystone.get(
        "/v2/queues", headers={**HEADERS, "Origin": DASHBOARD_ORIGIN, "X-Auth-Token": token}
    )
    assert got.status_code == 200, got.text
    assert got.headers["Access-Control-Allow-Origin"] == DASHBOARD_ORIGIN
    assert "x-openstack-request-id" in got.headers["Access-Control-Expose-Headers"].lower()


def test_without_allowed_origin_no_cors_headers_are_sent(
    deploy: Callable[[str], Deployment],
) -> None:
    noauth = deploy("")
    got = noauth.get("/v2/queues", headers={**HEADERS, "Origin": DASHBOARD_ORIGIN})
    assert got.status_code == 200
    assert "Access-Control-Allow-Origin" not in got.headers


# -- proxy headers -----------------------------------------------------------------------------


def seen_by_the_app(conf_text: str, tmp_path: Path, headers: dict[str, str]) -> dict[str, Any]:
    """The environ an app inside the stack receives for a request with ``headers``."""
    conf = tmp_path / "proxy.conf"
    conf.write_text(conf_text)
    seen: dict[str, Any] = {}

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        seen.update(environ)
        start_response("204 No Content", [])
        return [b""]

    client = falcon.testing.TestClient(with_oslo_middleware(app, load_settings([str(conf)])))
    assert client.simulate_get("/v2/queues", headers=headers).status_code == 204
    return seen


FORWARDED = {
    "X-Forwarded-Proto": "https",
    "X-Forwarded-Host": "queues.example.com",
    "X-Forwarded-For": "198.51.100.20",
}


def test_behind_a_tls_proxy_the_forwarded_scheme_and_host_are_used(tmp_path: Path) -> None:
    seen = seen_by_the_app(
        "[oslo_middleware]\nenable_proxy_headers_parsing = true\n", tmp_path, FORWARDED
    )
    assert seen["wsgi.url_scheme"] == "https"
    assert seen["HTTP_HOST"] == "queues.example.com"
    assert seen["REMOTE_ADDR"] == "198.51.100.20"
    assert REQUEST_ID.match(seen["openstack.request_id"])


def test_without_a_proxy_forwarded_headers_are_ignored(tmp_path: Path) -> None:
    # A client talking to the server directly cannot pose as another host or address.
    seen = seen_by_the_app("", tmp_path, FORWARDED)
    assert seen["wsgi.url_scheme"] == "http"
    assert seen["HTTP_HOST"] != "queues.example.com"
    assert seen.get("REMOTE_ADDR") != "198.51.100.20"
