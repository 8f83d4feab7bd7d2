"""Keystone trusts for ``trust+http(s)://`` subscribers (``push/trusts.py`` says how they are
used): created, used for a token and deleted with the ``[trustee]`` service user.

Needs the keystone extra (keystoneauth1, python-keystoneclient), imported where used so that a
deployment without ``[trustee]`` never loads them; :func:`trusts_of` tells a deployment that
names a service user without the extra, in one line, what to install.
"""

from __future__ import annotations

import datetime
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from oslo_config import cfg

from zaqar_delay import errors
from zaqar_delay.keystone import keystoneauth_loading
from zaqar_delay.push.trusts import Caller, TrustRefused

if TYPE_CHECKING:
    from keystoneclient.v3 import client as keystone_client

GROUP = "trustee"
# Trust-scoped auth plugins kept (each holds its token until it nears expiry).
CACHED_PLUGINS = 1024


class Trusts:
    """Creates, uses and deletes trusts to the ``[trustee]`` service user."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        """``conf``: parsed configuration with ``[trustee]``; its options are registered
        here (keystoneauth's, for the configured ``auth_type``)."""
        from keystoneauth1 import loading

        loading.register_auth_conf_options(conf, GROUP)
        loading.register_session_conf_options(conf, GROUP)
        self._conf = conf
        auth = loading.load_auth_from_conf_options(conf, GROUP)
        if auth is None:
            raise errors.StorageConfigError(f"[{GROUP}] names no auth_type")
        self._auth = auth
        self._session = loading.load_session_from_conf_options(conf, GROUP, auth=self._auth)
        self._identity_url = str(conf[GROUP].auth_url).rstrip("/")
        self._plugins: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def _user_client(self, caller: Caller) -> keystone_client.Client:
        from keystoneauth1 import session, token_endpoint
        from keystoneclient.v3 import client as keystone_client

        # The user's own token, used as is (no re-authentication) against Keystone.
        plugin = token_endpoint.Token(self._identity_url, caller.token)
        return keystone_client.Client(session=session.Session(auth=plugin))

    def create(self, caller: Caller, project: str, expires_at: datetime.datetime) -> str:
        """A trust from ``caller`` to the service user on ``project``; its id."""
        from keystoneauth1 import exceptions as ks_exceptions

        try:
            trustee = self._auth.get_user_id(self._session)
            trust = self._user_client(caller).trusts.create(
                trustee_user=trustee,
                trustor_user=caller.user_id,
                project=project,
                role_names=list(caller.roles),
                impersonation=True,
                expires_at=expires_at,
            )
        except ks_exceptions.ClientException as exc:
            raise errors.StorageUnavailable(f"Keystone did not create the trust: {exc}") from exc
        return str(trust.id)

    def delete(self, caller: Caller, trust_id: str) -> None:
        """Delete the trust (one already gone is fine)."""
        from keystoneauth1 import exceptions as ks_exceptions

        with self._lock:
            self._plugins.pop(trust_id, None)
        try:
            self._user_client(caller).trusts.delete(trust_id)
        except ks_exceptions.NotFound:
            return
        except ks_exceptions.ClientException as exc:
            raise errors.StorageUnavailable(f"Keystone did not delete the trust: {exc}") from exc

    def trustor_of(self, caller: Caller, trust_id: str) -> str | None:
        """The trustor of ``trust_id`` as Keystone shows it to ``caller`` (a trust's trustor
        and trustee may read it); None when Keystone shows it to them not at all."""
        from keystoneauth1 import exceptions as ks_exceptions

        try:
            trust = self._user_client(caller).trusts.get(trust_id)
        except (ks_exceptions.NotFound, ks_exceptions.Forbidden, ks_exceptions.Unauthorized):
            return None
        except ks_exceptions.ClientException as exc:
            raise errors.StorageUnavailable(f"Keystone did not show the trust: {exc}") from exc
        trustor = getattr(trust, "trustor_user_id", None)
        return str(trustor) if trustor else None

    def token(self, trust_id: str) -> str:
        """A token of the trustor obtained through ``trust_id``. TrustRefused when Keystone
        refuses it; OSError when Keystone cannot be reached."""
        from keystoneauth1 import exceptions as ks_exceptions
        from keystoneauth1 import loading

        with self._lock:
            plugin = self._plugins.pop(trust_id, None)
            if plugin is None:
                plugin = loading.load_auth_from_conf_options(self._conf, GROUP, trust_id=trust_id)
            self._plugins[trust_id] = plugin
            while len(self._plugins) > CACHED_PLUGINS:
                self._plugins.popitem(last=False)
        try:
            token = self._session.get_token(auth=plugin)
        except ks_exceptions.Unauthorized as exc:
            raise TrustRefused(str(exc)) from exc
        except ks_exceptions.ClientException as exc:
            raise OSError(f"Keystone did not answer: {exc}") from exc
        if token is None:
            raise TrustRefused("Keystone gave no token")
        return str(token)


def trusts_of(conf: cfg.ConfigOpts) -> Trusts | None:
    """The trusts of ``conf``, when ``[trustee] auth_type`` names a service user; else
    None (a trust+ subscriber is then pushed without a token)."""
    keystoneauth_loading().register_auth_conf_options(conf, GROUP)
    if not conf[GROUP].auth_type:
        return None
    return Trusts(conf)
