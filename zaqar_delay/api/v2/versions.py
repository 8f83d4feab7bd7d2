"""GET / (the versions document) and GET /v2/ (the JSON-home document)."""

from __future__ import annotations

import json

import falcon

from zaqar_delay.api import openapi
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


def _resource(
    template: str, variables: dict[str, str], allow: list[str], **hints: object
) -> dict[str, object]:
    entry: dict[str, object] = {
        "href-template": template,
        "href-vars": {name: f"param/{kind}" for name, kind in variables.items()},
        "hints": {"allow": allow, "formats": {"application/json": {}}, **hints},
    }
    return entry


_Q = {"queue_name": "queue_name"}
_QM = {"queue_name": "queue_name", "message_id": "message_id"}
_QC = {"queue_name": "queue_name", "claim_id": "claim_id"}
_LIST = "{?marker,limit,echo,include_claimed,include_delayed}"

HOME = {
    "resources": {
        "rel/queues": _resource(
            "/v2/queues{?marker,limit,detailed,with_count}",
            {
                "marker": "marker",
                "limit": "size",
                "detailed": "detailed",
                "with_count": "with_count",
            },
            ["GET"],
        ),
        "rel/queue": _resource("/v2/queues/{queue_name}", _Q, ["PUT", "GET", "PATCH", "DELETE"]),
        "rel/queue_stats": _resource("/v2/queues/{queue_name}/stats", _Q, ["GET"]),
        "rel/queue_purge": _resource("/v2/queues/{queue_name}/purge", _Q, ["POST"]),
        "rel/messages": _resource(
            "/v2/queues/{queue_name}/messages" + _LIST,
            {
                **_Q,
                "marker": "marker",
                "limit": "size",
                "echo": "echo",
                "include_claimed": "include_claimed",
                "include_delayed": "include_delayed",
            },
            ["GET"],
        ),
        "rel/post_messages": _resource(
            "/v2/queues/{queue_name}/messages",
            _Q,
            ["POST"],
            **{"accept-post": ["application/json"]},
        ),
        "rel/messages_delete": _resource(
            "/v2/queues/{queue_name}/messages{?ids,pop}",
            {**_Q, "ids": "ids", "pop": "pop"},
            ["DELETE"],
        ),
        "rel/message_get": _resource("/v2/queues/{queue_name}/messages/{message_id}", _QM, ["GET"]),
        "rel/message_delete": _resource(
            "/v2/queues/{queue_name}/messages/{message_id}{?claim}",
            {**_QM, "claim": "claim_id"},
            ["DELETE"],
        ),
        "rel/post_claim": _resource(
            "/v2/queues/{queue_name}/claims{?limit}",
            {**_Q, "limit": "claim_limit"},
            ["POST"],
            **{"accept-post": ["application/json"]},
        ),
        "rel/claim": _resource("/v2/queues/{queue_name}/claims/{claim_id}", _QC, ["GET"]),
        "rel/patch_claim": _resource("/v2/queues/{queue_name}/claims/{claim_id}", _QC, ["PATCH"]),
        "rel/delete_claim": _resource("/v2/queues/{queue_name}/claims/{claim_id}", _QC, ["DELETE"]),
        "rel/ping": _resource("/v2/ping", {}, ["GET", "HEAD"]),
        "rel/health": _resource("/v2/health", {}, ["GET"]),
    }
}

HOME_JSON = json.dumps(HOME, sort_keys=True)


class Versions(Resource):
    public = True

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.status = falcon.HTTP_300
        resp.media = VERSIONS


class Home(Resource):
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = "application/json-home"
        resp.cache_control = ["max-age=86400"]
        resp.text = HOME_JSON


class OpenAPIDocument(Resource):
    """``GET /openapi.json``: the OpenAPI 3 description (``zaqar_delay.api.openapi``)."""

    public = True

    def __init__(self, service: Service) -> None:
        super().__init__(service)
        self._text = openapi.dumps(service.limits)  # limits the server enforces

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = falcon.MEDIA_JSON
        resp.text = self._text
