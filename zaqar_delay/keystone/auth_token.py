"""keystonemiddleware's ``auth_token`` in front of a WSGI app (``auth_strategy = keystone``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from zaqar_delay.conf import Settings, conf_of
from zaqar_delay.keystone import without_the_extra

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def token_checked(app: WSGIApp, settings: Settings) -> WSGIApp:
    """``app`` behind keystonemiddleware's ``auth_token`` of ``settings``: a request reaches
    it only with a valid token, its identity headers set from the token. StorageConfigError,
    saying what to install, without the keystone extra."""
    try:
        from keystonemiddleware import auth_token
    except ImportError as exc:
        raise without_the_extra(exc) from exc
    checked: WSGIApp = auth_token.AuthProtocol(app, {"oslo_config_config": conf_of(settings)})
    return checked
