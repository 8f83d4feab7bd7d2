"""The OpenAPI 3 description of the API, served at ``GET /openapi.json``, made from the route
table (``routes``) and the operation each responder declares (``operations``).

``etc/openapi.json`` is this document as a file (``python -m zaqar_delay.api.openapi``
writes it; a unit test keeps them equal). It describes the wire format a client sees, for
generated clients and for fuzzing (``tests/functional/test_fuzz.py`` runs schemathesis against
a live server with it); the API reference in ``api-ref/`` remains the prose documentation.
"""

from __future__ import annotations

import json
import re
import sys

from zaqar_delay.api.operations import operation_of
from zaqar_delay.api.routes import ROUTES
from zaqar_delay.api.schemas import PATH_PARAMETERS, Schema
from zaqar_delay.conf import Limits


def document(limits: Limits | None = None) -> Schema:
    """The whole OpenAPI 3.0 document, for a server with these limits (the defaults when
    None: the form in ``etc/openapi.json``)."""
    limits = limits or Limits()
    paths: Schema = {}
    for route in ROUTES:
        item: Schema = {}
        names = re.findall(r"\{(\w+)\}", route.template)
        if names:
            item["parameters"] = [PATH_PARAMETERS[name] for name in names]
        for method, responder in route.responders():
            item[method.lower()] = operation_of(responder).describe(limits)
        paths[route.template] = item
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "zaqar-delay",
            "version": "2",
            "description": "The Zaqar v2 messaging API with delayed delivery "
            "(see api-ref/ for the full reference).",
        },
        "paths": paths,
    }


def dumps(limits: Limits | None = None) -> str:
    return json.dumps(document(limits), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(dumps())
