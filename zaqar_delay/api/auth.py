"""Authentication in front of the API: none (``noauth``) or Keystone tokens (``keystone``).

With ``keystone``, keystonemiddleware's ``auth_token`` validates ``X-Auth-Token`` and replaces
the identity headers (``X-Project-ID``, ``X-Roles``, ...) with the token's, so a client cannot
claim another project or a role it lacks. As in Zaqar, requests that carry ``URL-Signature``
skip the token check (the API verifies the signature instead, and answers 404 when it does not
hold) and lose any ``X-Roles`` they sent; so do the routes the table marks ``tokenless``, the
public documents (``/``, ``/openapi.json``). ``/metrics`` is not among them: its labels name
every project's queues, so it needs a token with the admin role.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from zaqar_delay.api.routes import TOKENLESS_PATHS
from zaqar_delay.conf import Settings, conf_of

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def protect(app: WSGIApp, settings: Settings) -> WSGIApp:
    """``app`` behind the configured authentication."""
    if settings.auth_strategy == "noauth":
        return app
    from keystonemiddleware import auth_token

    checked = auth_token.AuthProtocol(app, {"oslo_config_config": conf_of(settings)})

    def dispatch(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if "HTTP_URL_SIGNATURE" in environ or environ.get("PATH_INFO") in TOKENLESS_PATHS:
            environ.pop("HTTP_X_ROLES", None)  # only a token can grant roles
            return app(environ, start_response)
        result: Iterable[bytes] = checked(environ, start_response)
        return result

    return dispatch
