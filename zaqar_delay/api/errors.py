"""Maps the service's error hierarchy to HTTP, once, for every route."""

from __future__ import annotations

import json
import logging
from typing import Any

import falcon

from zaqar_delay import errors

LOG = logging.getLogger(__name__)

STATUS: dict[type[errors.ZaqarDelayError], str] = {
    errors.InvalidRequest: falcon.HTTP_400,
    errors.InvalidBody: falcon.HTTP_400,
    errors.RequestTimeout: falcon.HTTP_408,
    errors.InvalidParameter: falcon.HTTP_400,
    errors.ClaimNotValid: falcon.HTTP_400,
    errors.MessageIsClaimed: falcon.HTTP_403,
    errors.Forbidden: falcon.HTTP_403,
    errors.NotFound: falcon.HTTP_404,
    errors.Conflict: falcon.HTTP_409,
    errors.TooManyRequests: falcon.HTTP_429,
    errors.StorageUnavailable: falcon.HTTP_503,
    errors.NoPoolFound: falcon.HTTP_503,
}

UNAVAILABLE = "The message store could not be reached. Please try again in a few seconds."


def _status(exc: errors.ZaqarDelayError) -> str:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return falcon.HTTP_500


def handle_service_error(
    req: falcon.Request, resp: falcon.Response, exc: errors.ZaqarDelayError, params: Any
) -> None:
    status = _status(exc)
    description = exc.description
    if isinstance(exc, errors.StorageUnavailable):
        LOG.warning("request %s: %s", req.context.get("request_id"), exc.description)
        if not exc.tells_the_client:
            description = UNAVAILABLE
    headers = {}
    if isinstance(exc, errors.TooManyRequests | errors.FirstPostPending):
        headers["Retry-After"] = str(exc.retry_after_s)
    raise falcon.HTTPError(status, title=exc.title, description=description, headers=headers)


def handle_unexpected(
    req: falcon.Request, resp: falcon.Response, exc: Exception, params: Any
) -> None:
    """A bug: log it with the request id, answer 500 without internals."""
    if isinstance(exc, falcon.HTTPError):
        raise exc
    LOG.exception("request %s failed", req.context.get("request_id"))
    raise falcon.HTTPError(
        falcon.HTTP_500,
        title="Internal server error",
        description="The server could not complete the request. It has been logged.",
    )


# What an error falcon raises by itself (no route, no responder) says.
ROUTING_DESCRIPTIONS = {
    404: "There is no resource at this path.",
    405: "This resource does not answer this method.",
}


def serialize_as_json(req: falcon.Request, resp: falcon.Response, exc: falcon.HTTPError) -> None:
    """Every error as a JSON document with a title and a description, whatever the client
    says it accepts. falcon's own serializer answers XML to a client that prefers it and
    nothing at all to one that accepts neither, so the 406 that tells such a client to
    accept JSON would say nothing; and its routing errors have no description."""
    document = exc.to_dict()
    document.setdefault("description", ROUTING_DESCRIPTIONS.get(exc.status_code, exc.title))
    resp.data = json.dumps(document).encode()
    resp.content_type = falcon.MEDIA_JSON


def register(app: falcon.App[falcon.Request, falcon.Response]) -> None:
    app.set_error_serializer(serialize_as_json)
    app.add_error_handler(Exception, handle_unexpected)
    app.add_error_handler(errors.ZaqarDelayError, handle_service_error)
