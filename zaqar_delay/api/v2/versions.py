"""GET / (the versions document), GET /v2/ (the JSON-home document) and GET /openapi.json."""

from __future__ import annotations

import falcon

from zaqar_delay.api.operations import operation
from zaqar_delay.api.schemas import json_content, ok
from zaqar_delay.api.v2.base import Resource
from zaqar_delay.service import Service

VERSIONS = {
    "versions": [
        {
            "id": "2",
            "status": "CURRENT",
            "updated": "2014-9-24T04:06:47Z",
            "media-types": [
                {"base": "application/json", "type": "application/vnd.openstack.messaging-v2+json"}
            ],
            "links": [{"href": "/v2/", "rel": "self"}],
        }
    ]
}


class Versions(Resource):
    @operation("Versions", ok("300", "versions"), context=())
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.status = falcon.HTTP_300
        resp.media = VERSIONS


class Home(Resource):
    """``GET /v2/``: the JSON-home document (``zaqar_delay.api.home``)."""

    def __init__(self, service: Service, text: str) -> None:
        """``text``: the document (``home.dumps()``), made by the app from the route table."""
        super().__init__(service)
        self._text = text

    @operation("Home document", ok("200", "JSON-home"))
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = "application/json-home"
        resp.cache_control = ["max-age=86400"]
        resp.text = self._text


class OpenAPIDocument(Resource):
    """``GET /openapi.json``: the OpenAPI 3 description (``zaqar_delay.api.openapi``)."""

    def __init__(self, service: Service, text: str) -> None:
        """``text``: the description (``openapi.dumps(limits)``) with the server's limits."""
        super().__init__(service)
        self._text = text

    @operation(
        "This document",
        {"200": {"description": "OpenAPI 3", "content": json_content({})}},
        plain=True,
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = falcon.MEDIA_JSON
        resp.text = self._text
