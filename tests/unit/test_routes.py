"""The route table is the one list of routes: the router serves exactly it, every responder
declares its operation, the OpenAPI description and the JSON-home document are made from
them, and the API reference and the isolation test agree with it."""

from __future__ import annotations

import re
from pathlib import Path

import falcon.testing
import pytest

from tests.helpers.api import other_project_calls
from zaqar_delay.api import home, openapi
from zaqar_delay.api.operations import operation_of
from zaqar_delay.api.routes import ROUTES, Route

ROOT = Path(__file__).resolve().parents[2]
TABLE = {route.template: route for route in ROUTES}
OPERATIONS = {(method, route.template) for route in ROUTES for method in route.methods()}


def template_of(href: str) -> str:
    """A path with its query part (``{?...}`` or ``?...``) cut off."""
    return re.split(r"\{\?|\?", href, maxsplit=1)[0]


def test_every_route_has_a_responder_and_the_router_serves_it() -> None:
    assert len(TABLE) == len(ROUTES)
    router = falcon.routing.CompiledRouter()
    for route in ROUTES:
        assert route.methods(), route.template
        router.add_route(route.template, object())
    for route in ROUTES:
        example = re.sub(r"\{(\w+)\}", "x", route.template)
        assert router.find(example) is not None, route.template


def test_the_openapi_description_has_exactly_the_routes_and_their_methods() -> None:
    paths = openapi.document()["paths"]
    assert set(paths) == set(TABLE)
    for template, item in paths.items():
        described = {m.upper() for m in item if m != "parameters"}
        assert described == TABLE[template].methods(), template


def test_every_responder_declares_its_operation() -> None:
    for route in ROUTES:
        for method, responder in route.responders():
            assert operation_of(responder).summary, (method, route.template)


def test_the_json_home_document_names_only_routes_and_methods_they_answer() -> None:
    resources = home.document()["resources"]
    # Zaqar's relations, every one of them (python-zaqarclient looks them up by name), and
    # the recurring schedules' (an extension).
    assert set(resources) == {
        "rel/queues", "rel/queue", "rel/queue_stats", "rel/queue_purge", "rel/messages",
        "rel/post_messages", "rel/messages_delete", "rel/message_get", "rel/message_delete",
        "rel/post_claim", "rel/claim", "rel/patch_claim", "rel/delete_claim", "rel/ping",
        "rel/health", "rel/subscriptions_get", "rel/subscriptions_post", "rel/subscription",
        "rel/subscription_patch", "rel/schedules", "rel/schedule", "rel/schedule_run",
    }  # fmt: skip
    assert resources["rel/schedule"]["hints"]["allow"] == ["PUT", "GET", "PATCH", "DELETE"]
    assert resources["rel/queue"]["hints"]["allow"] == ["PUT", "GET", "PATCH", "DELETE"]
    for rel, resource in resources.items():
        template = template_of(resource["href-template"])
        assert template in TABLE, rel
        assert set(resource["hints"]["allow"]) <= TABLE[template].methods(), rel


def test_the_api_reference_documents_every_operation_and_no_other() -> None:
    documented = set()
    for page in (ROOT / "api-ref" / "source").glob("*.inc"):
        for method, href in re.findall(r"rest_method:: (\w+) (\S+)", page.read_text()):
            documented.add((method, template_of(href)))
    assert documented <= OPERATIONS
    # HEAD /v2/ping is the same operation as GET /v2/ping.
    assert OPERATIONS - documented == {("HEAD", "/v2/ping")}


@pytest.mark.parametrize("route", [r for r in ROUTES if r.template.startswith("/v2/queues/")])
def test_the_isolation_test_tries_every_queue_route(route: Route) -> None:
    ids = {"ids": ["m1", "m2", "m3"], "claim_id": "c1", "claimed": ["m1"], "subscription_id": "s1"}
    tried = {(method, template_of(path)) for method, path, _, _ in other_project_calls(ids)}
    router = falcon.routing.CompiledRouter()
    router.add_route(route.template, object())
    for method in route.methods():
        hits = [p for m, p in tried if m == method and router.find(p) is not None]
        assert hits, f"{method} {route.template} is not tried as another project"
