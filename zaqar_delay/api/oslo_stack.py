"""oslo.middleware around the API, as an OpenStack operator expects it, outermost first:

- ``http_proxy_to_wsgi`` (with ``[oslo_middleware] enable_proxy_headers_parsing``): behind a
  TLS proxy, the scheme, host and client address are the forwarded ones
  (``Forwarded``, or ``X-Forwarded-Proto``/``-Host``/``-For``); a forwarded scheme other than
  ``http``/``https``, or a host that is not one, is refused (:class:`ForwardedChecked`);
- ``request_id``'s contract (:class:`RequestIds`): ``x-openstack-request-id`` on every
  response, authentication refusals included; the API and the logs use the same id
  (``openstack.request_id`` in the environment);
- ``cors`` (with ``[cors] allowed_origin``): the dashboard or another web client served from
  another origin;
- ``healthcheck`` at ``/healthcheck`` (``[healthcheck]`` options, such as
  ``disable_by_file_path`` to drain a server): no token needed, so a load balancer probes
  it; its details (``detailed``, for ``Accept: application/json``) are shown only to a
  caller the ``health:get`` rule allows (keystone: identity headers a client sent are
  removed first, only a validated token counts, and a ``URL-Signature`` is refused with
  404) or that sends the admin role (noauth).

Layers that an option turns on are left out when it is off, so a deployment pays only for
what it uses. ``cors`` and ``http_proxy_to_wsgi`` answer through webob, which makes a
``Location`` header absolute (from the forwarded host, behind a proxy); without them it stays
the relative one Zaqar sends.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from oslo_config import cfg
from oslo_middleware import cors, healthcheck, http_proxy_to_wsgi, request_id
from oslo_middleware.healthcheck import opts as healthcheck_opts

from zaqar_delay import errors
from zaqar_delay.api.auth import (
    SIGNATURE_ENVIRON_KEY,
    WSGIApp,
    refuse_signature,
    strip_identity,
    token_checked,
)
from zaqar_delay.api.authorization import Authorizer, keystone_authorizer
from zaqar_delay.api.middleware import new_request_id
from zaqar_delay.conf import Settings, conf_of

HEALTHCHECK_PATH = "/healthcheck"
GLOBAL_ID = re.compile(request_id.ID_FORMAT)
_INBOUND_ENV = "HTTP_" + request_id.INBOUND_HEADER.upper().replace("-", "_")
# What a browser client of the API sends and reads (``[cors]`` options may change them).
CORS_DEFAULTS: dict[str, list[str]] = {
    "allow_headers": [
        "X-Auth-Token",
        "Client-ID",
        "X-Project-ID",
        "Content-Type",
        "URL-Signature",
        "URL-Expires",
        "URL-Methods",
        "URL-Paths",
        "X-OpenStack-Request-ID",
    ],
    "expose_headers": ["X-OpenStack-Request-ID", "Location"],
    "allow_methods": ["GET", "HEAD", "PUT", "POST", "PATCH", "DELETE"],
}


class Healthcheck(healthcheck.Healthcheck):
    """oslo's healthcheck, whose detailed answer survives a dead weak proxy on the heap: it
    finds greenlets by ``isinstance`` over ``gc.get_objects()``, which raises ReferenceError
    on such a proxy; the answer then lists no greenlets instead of failing."""

    @staticmethod
    def _get_greenstacks() -> list[Any]:
        try:
            return healthcheck.Healthcheck._get_greenstacks()
        except ReferenceError:
            return []


def _healthcheck(app: WSGIApp, conf: cfg.ConfigOpts, detailed: bool) -> healthcheck.Healthcheck:
    """oslo's healthcheck on ``conf``'s ``[healthcheck]``, with or without its details; a
    probe it declines (``allowed_source_ranges``, ``ignore_proxied_requests``) goes on to
    ``app``, which does not know the path (404)."""
    conf.register_opts(healthcheck_opts.HEALTHCHECK_OPTS, group="healthcheck")
    conf.set_override("detailed", detailed, group="healthcheck")
    return Healthcheck(app, conf)


class HealthcheckRoute:
    """``/healthcheck`` answered before authentication; everything else passes to ``app``.
    A caller that presents credentials gets the details when they are an admin's."""

    def __init__(self, app: WSGIApp, settings: Settings) -> None:
        self._app = app
        self._plain = _healthcheck(app, conf_of(settings), detailed=False)
        self._detailed = _healthcheck(app, conf_of(settings), detailed=True)
        self._keystone = settings.server.auth_strategy == "keystone"
        self._authorizer: Authorizer | None = None
        self._checked: WSGIApp | None = None
        if self._keystone:
            # A token is validated by keystonemiddleware, then held to the health:get rule.
            self._authorizer = keystone_authorizer(settings)
            self._checked = token_checked(self._admin_or_plain, settings)

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != HEALTHCHECK_PATH:
            return self._app(environ, start_response)
        if self._checked is not None:
            # Only a token says who the caller is; no signed URL reaches this path.
            strip_identity(environ)
            if SIGNATURE_ENVIRON_KEY in environ:
                return refuse_signature(start_response)
            if "HTTP_X_AUTH_TOKEN" in environ:
                return self._checked(environ, start_response)
            return self._answer(self._plain, environ, start_response)
        roles = {r.strip().lower() for r in environ.get("HTTP_X_ROLES", "").split(",")}
        probe = self._detailed if "admin" in roles else self._plain
        return self._answer(probe, environ, start_response)

    def _admin_or_plain(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        assert self._authorizer is not None
        try:
            self._authorizer.authorize_rule(
                "health:get", environ, environ.get("HTTP_X_PROJECT_ID", "")
            )
            probe = self._detailed
        except errors.Forbidden:
            probe = self._plain
        return self._answer(probe, environ, start_response)

    @staticmethod
    def _answer(
        probe: healthcheck.Healthcheck,
        environ: dict[str, Any],
        start_response: Callable[..., Any],
    ) -> Iterable[bytes]:
        result: Iterable[bytes] = probe(environ, start_response)
        return result


FORWARDED_SCHEMES = frozenset({"http", "https"})
# A host name or an IPv4 address, or an IPv6 address in brackets, with an optional port.
FORWARDED_HOST = re.compile(
    r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_][A-Za-z0-9_.-]{0,252})(?::\d{1,5})?$"
)


class ForwardedChecked:
    """Behind ``http_proxy_to_wsgi``: a request whose forwarded scheme is not ``http`` or
    ``https``, or whose forwarded host is not a host, is refused (400) before anything
    builds a URL (``Location``) from them."""

    def __init__(self, app: WSGIApp) -> None:
        self._app = app

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        scheme = environ.get("wsgi.url_scheme", "")
        host = environ.get("HTTP_HOST")
        if scheme not in FORWARDED_SCHEMES or (host is not None and not FORWARDED_HOST.match(host)):
            body = json.dumps(
                {
                    "title": "Invalid forwarded header",
                    "description": "A forwarded scheme must be http or https, and a forwarded "
                    "host a host name or address with an optional port.",
                }
            ).encode()
            start_response(
                "400 Bad Request",
                [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
            )
            return [body]
        result: Iterable[bytes] = self._app(environ, start_response)
        return result


class RequestIds:
    """oslo.middleware's ``request_id`` contract, as plain WSGI: a fresh id (oslo.context's
    form) in ``openstack.request_id``, a valid inbound ``X-OpenStack-Request-ID`` in
    ``openstack.global_request_id``, and the id in ``x-openstack-request-id`` on every
    response. oslo's own class answers through webob, which rewrites a relative
    ``Location`` (Zaqar's) into an absolute URI, and costs about 19 µs a request."""

    def __init__(self, app: WSGIApp) -> None:
        self._app = app

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        inbound = environ.get(_INBOUND_ENV, "")
        if GLOBAL_ID.match(inbound):
            environ[request_id.GLOBAL_REQ_ID] = inbound
        given = new_request_id()
        environ[request_id.ENV_REQUEST_ID] = given

        def start_with_id(
            status: str, headers: list[tuple[str, str]], *exc_info: Any
        ) -> Callable[[bytes], Any]:
            if not any(k.lower() == request_id.HTTP_RESP_HEADER_REQUEST_ID for k, _ in headers):
                headers = [*headers, (request_id.HTTP_RESP_HEADER_REQUEST_ID, given)]
            result: Callable[[bytes], Any] = start_response(status, headers, *exc_info)
            return result

        result: Iterable[bytes] = self._app(environ, start_with_id)
        return result


def with_oslo_middleware(app: WSGIApp, settings: Settings) -> WSGIApp:
    """``app`` (authentication included) inside the layers of the module's docstring."""
    conf = conf_of(settings)
    conf.register_opts(http_proxy_to_wsgi.OPTS, group="oslo_middleware")
    conf.register_opts(cors.CORS_OPTS, group="cors")
    for name, default in CORS_DEFAULTS.items():
        conf.set_default(name, default, group="cors")
    wrapped: WSGIApp = HealthcheckRoute(app, settings)
    if conf.cors.allowed_origin:
        wrapped = cors.CORS(wrapped, conf)
    wrapped = RequestIds(wrapped)
    if conf.oslo_middleware.enable_proxy_headers_parsing:
        wrapped = http_proxy_to_wsgi.HTTPProxyToWSGI(ForwardedChecked(wrapped), conf)
    outermost = wrapped

    # A plain function: servers and falcon's test client inspect the app's signature, which
    # webob's decorated middleware does not have.
    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        result: Iterable[bytes] = outermost(environ, start_response)
        return result

    return application
