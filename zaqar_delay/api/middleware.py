"""What every request goes through before its responder, in Zaqar's order.

Request id; urlencoded bodies refused; Accept checked; Client-ID and X-Project-ID required
and validated; queue names validated; then, under keystone, the route's policy rule
(``api/authorization.py``; a verified pre-signed request is authorised by its signature), or,
with noauth, the admin role for admin-only routes.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from typing import Any

import falcon
from oslo_middleware import request_id

from zaqar_delay import errors, topics, validation
from zaqar_delay.api.authorization import Authorizer
from zaqar_delay.api.routes import ADMIN_TEMPLATES, POOLING_TEMPLATES, PUBLIC_TEMPLATES
from zaqar_delay.logs import request_context
from zaqar_delay.metrics import Metrics
from zaqar_delay.service import Service
from zaqar_delay.signed_urls import Signer

LOG = logging.getLogger(__name__)


def new_request_id() -> str:
    """A request id in oslo.context's form (``req-<uuid4>``). Random, not secret: the
    generator's bits spare a getrandom() call per request."""
    return f"req-{uuid.UUID(int=random.getrandbits(128), version=4)}"


class RequestContext:
    """Stores ``request_id``, ``project``, ``client_id`` and ``roles`` in ``req.context``."""

    def __init__(
        self,
        service: Service,
        signer: Signer,
        default_project: str = "",
        open_admin_api: bool = False,
        authorizer: Authorizer | None = None,
    ) -> None:
        """``signer`` checks pre-signed requests; ``default_project`` (noauth only) stands in
        for a missing X-Project-ID header; ``open_admin_api`` (noauth with ``admin_mode``)
        serves the pools and flavors API without the admin role, as Zaqar does;
        ``authorizer`` (keystone) enforces the policy of every route."""
        self._authorizer = authorizer
        self._limits = service.limits
        self._signer = signer
        self._default_project = default_project
        self._open_admin_api = open_admin_api

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        # oslo.middleware's request_id (oslo_stack.py) made one and adds the header itself.
        given = req.env.get(request_id.ENV_REQUEST_ID)
        if given is not None:
            req.context.request_id = given
        else:
            req.context.request_id = new_request_id()
            resp.set_header(request_id.HTTP_RESP_HEADER_REQUEST_ID, req.context.request_id)
        # What oslo.log's formatters read: each line logged while serving names the request.
        req.context.logging = request_context(req.context.request_id)

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        # Checks run only for routes that exist and methods they answer: 404 and 405 come first.
        if resource is None or not hasattr(resource, f"on_{req.method.lower()}"):
            return
        signed = self._verify_signature(req)
        if req.uri_template in PUBLIC_TEMPLATES:
            # No headers needed; under keystone a token still is, and the route's rule holds.
            if self._authorizer is not None:
                self._authorizer.authorize(req, req.get_header("X-Project-ID") or "")
            return
        _check_media_types(req)
        req.context.client_id = self._client_id(req)
        req.context.project = self._project(req)
        req.context.logging.project_id = req.context.project
        req.context.roles = [
            r.strip().lower() for r in (req.get_header("X-Roles") or "").split(",") if r.strip()
        ]
        topic = params.pop("topic_name", None)
        if topic is not None:
            _check_queue_name(topic, "Invalid topic identification")
            params["queue_name"] = topics.stored(topic)
        else:
            _check_queue_name(params.get("queue_name"))
        _check_queue_name(params.get("schedule_name"), "Invalid schedule identification")
        self._authorize(req, signed)

    def _verify_signature(self, req: falcon.Request) -> bool:
        """Whether the request claims a signature, verified. A claimed signature is verified
        before any rule runs (under keystone, auth.py has verified it already); no public
        route is ever signed, so there it is refused."""
        signed = req.get_header("URL-Signature") is not None
        if signed and not self._signer.allows(
            req.method,
            req.path,
            req.headers,  # names upper-cased by falcon
        ):
            # As Zaqar: a pre-signed request that does not verify is a plain 404.
            raise falcon.HTTPNotFound(description="The pre-signed URL does not allow this request.")
        return signed

    def _authorize(self, req: falcon.Request, signed: bool) -> None:
        """The route's policy rule under keystone (a verified signature stands in for it);
        without keystone, the admin routes need the admin role."""
        if self._authorizer is not None:
            if not signed:
                self._authorizer.authorize(req, req.context.project)
            return
        open_to_all = self._open_admin_api and req.uri_template in POOLING_TEMPLATES
        needs_admin = req.uri_template in ADMIN_TEMPLATES and not open_to_all
        if needs_admin and "admin" not in req.context.roles:
            raise errors.Forbidden()

    def _client_id(self, req: falcon.Request) -> str:
        value = req.get_header("Client-ID")
        if value is None:
            raise falcon.HTTPBadRequest(
                title="Missing header value", description='The "Client-Id" header is required.'
            )
        try:
            return validation.client_id(value, self._limits)
        except errors.InvalidRequest as exc:
            if self._limits.client_id_uuid_safe == "strict":
                raise falcon.HTTPBadRequest(
                    title="Wrong UUID value", description=exc.description
                ) from exc
            raise falcon.HTTPBadRequest(title=exc.description, description=exc.description) from exc

    def _project(self, req: falcon.Request) -> str:
        project = req.get_header("X-Project-ID")
        if project is None:
            project = req.get_header("X-Tenant-ID") or req.get_header("X-Tenant")
        if project is None and self._default_project:
            project = self._default_project
        if project is None:
            raise falcon.HTTPBadRequest(
                title="Project-Id Missing", description="The header X-PROJECT-ID was missing"
            )
        if project == "":
            raise falcon.HTTPBadRequest(
                title="Empty project header not allowed",
                description="X-PROJECT-ID cannot be an empty string. Specify the right header "
                "X-PROJECT-ID and retry.",
            )
        try:
            return validation.project_id(project)
        except errors.InvalidRequest as exc:
            raise falcon.HTTPBadRequest(
                title="Invalid queue identification", description=exc.description
            ) from exc


class RequestTimer:
    """falcon middleware: request duration by method and route template, and answers by
    those and status code."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.started = time.perf_counter()

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool
    ) -> None:
        started = req.context.get("started")
        if started is None:
            return
        route = req.uri_template or "unmatched"
        elapsed = time.perf_counter() - started
        self._metrics.observe_request(req.method, route, resp.status_code, elapsed)
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug("%s %s %d %.1f ms", req.method, req.path, resp.status_code, elapsed * 1e3)


def _check_media_types(req: falcon.Request) -> None:
    """JSON in, JSON out: a form body and a client that takes no JSON are refused."""
    if req.content_length and (req.content_type or "").startswith(
        "application/x-www-form-urlencoded"
    ):
        raise falcon.HTTPBadRequest(
            title="Invalid Content-Type",
            description="Request bodies must be JSON, not application/x-www-form-urlencoded.",
        )
    if not req.client_accepts_json:
        raise falcon.HTTPNotAcceptable(
            description="Endpoint only serves application/json; specify client-side "
            'media type support with the "Accept" header.'
        )


def _check_queue_name(queue: str | None, title: str = "Invalid queue identification") -> None:
    """A queue (or topic) named in the path is a valid name (Zaqar's title for it)."""
    if queue is None:
        return
    try:
        validation.queue_name(queue)
    except errors.InvalidRequest as exc:
        raise falcon.HTTPBadRequest(title=title, description=exc.description) from exc
