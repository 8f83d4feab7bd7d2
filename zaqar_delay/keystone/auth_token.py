"""keystonemiddleware's ``auth_token`` in front of a WSGI app (``auth_strategy = keystone``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from zaqar_delay.conf import Settings, conf_of
from zaqar_delay.errors import StorageConfigError
from zaqar_delay.keystone import keystoneauth_loading, without_the_extra

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
GROUP = "keystone_authtoken"


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


def check_configured(settings: Settings) -> None:
    """StorageConfigError when ``[keystone_authtoken]`` names no way to check a token (no
    ``auth_type``, in its group or the one ``auth_section`` names): keystonemiddleware then
    fails every request that carries one, and a request without one when
    ``www_authenticate_uri`` is unset too."""
    loading = keystoneauth_loading()
    conf = conf_of(settings)
    loading.register_auth_conf_options(conf, GROUP)
    section = conf[GROUP].auth_section or GROUP
    if section != GROUP:
        loading.register_auth_conf_options(conf, section)
    if not conf[section].auth_type:
        raise StorageConfigError(
            f"auth_strategy = keystone needs [{section}] auth_type, the service user that "
            "checks tokens (for example password, with auth_url, username, password, "
            "project_name, user_domain_name and project_domain_name)"
        )
