"""The OpenAPI description in etc/ is the one the server builds, and it covers every route."""

from __future__ import annotations

import json
import pathlib

from zaqar_delay.api import openapi
from zaqar_delay.api.app import create_app
from zaqar_delay.conf import Settings, StorageSettings

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_etc_copy_is_current() -> None:
    # Regenerate with: python -m zaqar_delay.api.openapi > etc/openapi.json
    assert (ROOT / "etc" / "openapi.json").read_text() == openapi.dumps()


def test_every_route_is_described() -> None:
    # Pooling and admin_mode: the admin API of pools and flavors is served too.
    settings = Settings(
        storage=StorageSettings(uri="redis://127.0.0.1:1/0"), pooling=True, admin_mode=True
    )
    app = create_app(settings)
    routes = set()
    stack = list(app._router._roots)
    while stack:
        node = stack.pop()
        if node.resource is not None:
            routes.add(node.uri_template)
        stack += node.children
    described = {path.rstrip("/") or "/" for path in json.loads(openapi.dumps())["paths"]}
    assert {route.rstrip("/") or "/" for route in routes} == described
