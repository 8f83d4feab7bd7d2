"""Keystone trusts for ``trust+http(s)://`` subscribers, as Zaqar makes them: the receiver
(Aodh, Mistral, Heat, another queue) acts as the subscribing user.

- Subscribing creates a trust from the user (the request's token) to the service user of
  ``[trustee]`` (keystoneauth options: ``auth_type``, ``auth_url``, ``username``, ...) on the
  user's project, with the user's roles, impersonation, expiring with the subscription. Its
  id is kept in the subscription's options as ``trust_id``, which only the service sets.
- Each push to such a subscriber goes to the URI without ``trust+``, with a token obtained
  through the trust in ``X-Auth-Token`` (the service user authenticates scoped to the trust;
  keystoneauth keeps each token until it nears its expiry).
- The subscription records its trustor (``trustor_id``, set by the service only): only the
  trustor, with their own token, changes or deletes it. A change of subscriber makes a new
  trust and deletes the old one; deleting the subscription deletes its trust first.

Keystone failures are ``StorageUnavailable`` (503) for the API; for a push they are a retry,
or a permanent failure when Keystone refuses the trust (deleted, expired).
"""

from __future__ import annotations

import dataclasses
import datetime
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from oslo_config import cfg

from zaqar_delay import errors

if TYPE_CHECKING:
    from keystoneclient.v3 import client as keystone_client

# keystoneauth1 and python-keystoneclient (zaqar-delay[keystone]) are imported where used:
# this module's names serve every deployment's pushes, noauth ones too.

PREFIX = "trust+"
TRUST_ID = "trust_id"
# The user whose trust a subscription holds: only they may change or delete it.
TRUSTOR_ID = "trustor_id"
SERVICE_OPTIONS = (TRUST_ID, TRUSTOR_ID)
GROUP = "trustee"
# Trust-scoped auth plugins kept (each holds its token until it nears expiry).
CACHED_PLUGINS = 1024


def is_trust(subscriber: str) -> bool:
    return subscriber.startswith(PREFIX)


def target_of(subscriber: str) -> str:
    """Where a push to ``subscriber`` goes: the URI without ``trust+``."""
    return subscriber[len(PREFIX) :] if is_trust(subscriber) else subscriber


@dataclasses.dataclass(frozen=True, slots=True)
class Caller:
    """The user behind a request, as keystonemiddleware validated it."""

    token: str
    user_id: str
    roles: tuple[str, ...]


class TrustRefused(Exception):
    """Keystone refused a trust-scoped token: the trust is gone or expired."""


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
    from keystoneauth1 import loading

    loading.register_auth_conf_options(conf, GROUP)
    if not conf[GROUP].auth_type:
        return None
    return Trusts(conf)
