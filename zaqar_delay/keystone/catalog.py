"""Zaqar's public endpoints in Keystone's catalog, for the URLs a confirmation request names
(``WSGISubscribeURL``, ``WebSocketSubscribeURL``), as Zaqar finds them: the services named
``zaqar`` and ``zaqar-websocket``, their public interface, read with the ``[keystone_authtoken]``
service user's credentials.

Looked up when a confirmation request is sent (in the background, never in a request), and
kept once found; until then each request looks again, so an endpoint registered later, or a
Keystone that was down, is found by the next one. Without credentials in
``[keystone_authtoken]`` there is nothing to look up, and a request names no URL, as in Zaqar.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from oslo_config import cfg

from zaqar_delay.keystone import keystoneauth_loading

LOG = logging.getLogger(__name__)

GROUP = "keystone_authtoken"
# A confirmation request's field, and the name of the service whose endpoint it joins.
SERVICES = {"WSGISubscribeURL": "zaqar", "WebSocketSubscribeURL": "zaqar-websocket"}
# How long a look-up may wait for Keystone: confirmation requests wait for it.
TIMEOUT_S = 10.0


class PublicEndpoints:
    """The public endpoints of Zaqar's services in the catalog, by confirmation field."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        """``conf``: parsed configuration with ``[keystone_authtoken]`` (keystoneauth's auth
        options are registered here). StorageConfigError, saying what to install, without
        the keystone extra."""
        keystoneauth_loading().register_auth_conf_options(conf, GROUP)
        self._conf = conf
        self._found: dict[str, str] = {}
        self._lock = threading.Lock()

    def urls(self, path: str) -> dict[str, str]:
        """The URL of ``path`` (absolute, as the API serves it) at each endpoint found. An
        endpoint's own path is kept: the API may be served under a prefix."""
        return {field: endpoint.rstrip("/") + path for field, endpoint in self._lookup().items()}

    def _lookup(self) -> Mapping[str, str]:
        with self._lock:
            if not self._found:
                self._found = self._read_catalog()
            return self._found

    def _read_catalog(self) -> dict[str, str]:
        from keystoneauth1 import exceptions, loading, session

        try:
            auth = loading.load_auth_from_conf_options(self._conf, GROUP)
            if auth is None:
                return {}
            reader = session.Session(auth=auth, verify=self._verify(), timeout=TIMEOUT_S)
            access = auth.get_auth_ref(reader)
        except (exceptions.ClientException, cfg.Error) as exc:
            LOG.warning("confirmation requests name no URL: Keystone's catalog: %s", exc)
            return {}
        if access is None:
            return {}
        catalog, found = access.service_catalog, {}
        for field, service in SERVICES.items():
            urls = [url for url in catalog.get_urls(service_name=service) if url]  # public
            if urls:
                found[field] = urls[0]
        return found

    def _verify(self) -> bool | str:
        """TLS verification as keystonemiddleware's own options in the group set it."""
        group = self._conf[GROUP]
        if getattr(group, "insecure", False):
            return False
        return getattr(group, "cafile", None) or True
