"""Authentication in front of the API: none (``noauth``) or Keystone tokens (``keystone``).

With ``keystone``, every request first loses every identity header keystonemiddleware would
set (``X-Roles``, ``X-Role``, ``X-User-Id``, ``X-Is-Admin-Project``, ``OpenStack-System-Scope``
and the rest: :data:`IDENTITY_ENVIRON_KEYS`), whatever it carries, so nothing downstream
(oslo.context, the policy, the trust checks) reads an identity the client made up. Then:

- a request that carries ``URL-Signature`` is a pre-signed one: its signature is verified
  here, before any policy rule runs, and a signature that does not hold the method and path
  (a route no signed URL can reach among them) is answered 404, as Zaqar answers it. Only
  ``X-Project-ID`` is kept for it: the signature binds that project;
- the routes the table marks ``tokenless`` (the public documents ``/`` and
  ``/openapi.json``) pass with no identity at all;
- every other request goes through keystonemiddleware's ``auth_token``, which validates
  ``X-Auth-Token`` and sets the identity headers from the token. ``/metrics`` is among them:
  its labels name every project's queues, so it needs a token with the admin role.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import falcon

from zaqar_delay.api.raw_errors import json_error
from zaqar_delay.api.routes import TOKENLESS_PATHS
from zaqar_delay.clock import Clock
from zaqar_delay.conf import Settings
from zaqar_delay.keystone.auth_token import WSGIApp, token_checked
from zaqar_delay.signed_urls import Signer

__all__ = ["WSGIApp", "protect", "refuse_signature", "strip_identity", "token_checked"]

# The headers keystonemiddleware's auth_token removes from every request before it sets them
# from a token (its ``_AuthTokenRequest._all_auth_headers``), and the system scope it sets
# besides; tests/api/test_identity_spoofing.py holds the list to both libraries.
_SCOPED = (
    "Domain-Id",
    "Domain-Name",
    "Project-Id",
    "Project-Name",
    "Project-Domain-Id",
    "Project-Domain-Name",
    "User-Id",
    "User-Name",
    "User-Domain-Id",
    "User-Domain-Name",
    "Roles",
)
IDENTITY_HEADERS: tuple[str, ...] = (
    *(f"X-{name}" for name in _SCOPED),
    *(f"X-Service-{name}" for name in _SCOPED),
    "X-Service-Catalog",
    "X-Identity-Status",
    "X-Service-Identity-Status",
    "X-Is-Admin-Project",
    "OpenStack-System-Scope",
    # Deprecated names that keystonemiddleware still sets and oslo.context still reads.
    "X-Role",
    "X-User",
    "X-Tenant-Id",
    "X-Tenant-Name",
    "X-Tenant",
)


def environ_key(header: str) -> str:
    """The WSGI environment's key of an HTTP header."""
    return "HTTP_" + header.upper().replace("-", "_")


IDENTITY_ENVIRON_KEYS = frozenset(environ_key(h) for h in IDENTITY_HEADERS)
PROJECT_ENVIRON_KEY = environ_key("X-Project-Id")
SIGNATURE_ENVIRON_KEY = environ_key("URL-Signature")


def strip_identity(environ: dict[str, Any], keep_project: bool = False) -> None:
    """Remove every identity header from ``environ`` (``X-Project-ID`` stays when
    ``keep_project``: a pre-signed request's, which its signature binds)."""
    for key in IDENTITY_ENVIRON_KEYS:
        if keep_project and key == PROJECT_ENVIRON_KEY:
            continue
        environ.pop(key, None)


def signed_request_allowed(signer: Signer, environ: dict[str, Any]) -> bool:
    """Whether the ``URL-*`` headers of ``environ`` sign its method and path now."""
    headers = {
        key[5:].replace("_", "-"): value
        for key, value in environ.items()
        if key.startswith("HTTP_") and isinstance(value, str)
    }
    return signer.allows(environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", ""), headers)


def refuse_signature(start_response: Callable[..., Any]) -> Iterable[bytes]:
    """The API's 404, as a signature that does not hold is answered."""
    return json_error(
        start_response,
        falcon.HTTP_404,
        "404 Not Found",
        "The pre-signed URL does not allow this request.",
    )


def protect(app: WSGIApp, settings: Settings, clock: Clock) -> WSGIApp:
    """``app`` behind the configured authentication; ``clock`` dates pre-signed URLs."""
    if settings.server.auth_strategy == "noauth":
        return app
    checked = token_checked(app, settings)
    signer = Signer(settings.signed_url.secret_key, clock)

    def dispatch(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        signed = SIGNATURE_ENVIRON_KEY in environ
        strip_identity(environ, keep_project=signed)
        if signed:
            if not signed_request_allowed(signer, environ):
                return refuse_signature(start_response)
            return app(environ, start_response)
        if environ.get("PATH_INFO") in TOKENLESS_PATHS:
            return app(environ, start_response)
        result: Iterable[bytes] = checked(environ, start_response)
        return result

    return dispatch
