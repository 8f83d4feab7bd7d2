"""The JSON-home document (``GET /v2/``) in Zaqar's form, made from the route table
(``routes``) and the JSON-home relation each responder declares (``operations.HomeLink``)."""

from __future__ import annotations

import json
import re
from typing import Any

from zaqar_delay.api.operations import operation_of
from zaqar_delay.api.routes import ROUTES


def document() -> dict[str, Any]:
    """``{"resources": {rel: {"href-template", "href-vars", "hints"}}}``: one entry per
    relation, allowing the methods of the operations that declare it."""
    resources: dict[str, Any] = {}
    for route in (route for route in ROUTES if route.home):
        for method, responder in route.responders():
            link = operation_of(responder).home
            if link is None:
                continue
            if link.rel in resources:
                resources[link.rel]["hints"]["allow"].append(method)
                continue
            variables = {name: name for name in re.findall(r"\{(\w+)\}", route.template)}
            variables.update(link.query)
            query = "{?" + ",".join(name for name, _ in link.query) + "}" if link.query else ""
            hints: dict[str, Any] = {"allow": [method], "formats": {"application/json": {}}}
            if link.accept_post:
                hints["accept-post"] = ["application/json"]
            resources[link.rel] = {
                "href-template": route.template + query,
                "href-vars": {name: f"param/{kind}" for name, kind in variables.items()},
                "hints": hints,
            }
    return {"resources": resources}


def dumps() -> str:
    return json.dumps(document(), sort_keys=True)
