"""Who the driver is to Swift and where to find it (:class:`SwiftAccess`), and the access a
``swift://`` storage URI names, its query overriding the configured options: a pool's URI is
hostile input, so every option is known, typed and checked here. An access makes the
authenticated connections the requests go through (``connect.py``)."""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Callable
from typing import Any

import swiftclient

from zaqar_delay import errors
from zaqar_delay.storage.bounds import SWIFT_METADATA_CACHE_MS, SWIFT_SETTLE_MS
from zaqar_delay.storage.swift.timing import REQUEST_ATTEMPTS, SwiftTimes

SCHEMES = ("swift",)


@dataclasses.dataclass(frozen=True)
class SwiftAccess:
    """Who the driver is to Swift and where to find it.

    ``auth_url`` ending in ``/auth/v1.0`` (or ``/v1.0``) is tempauth: ``user`` is
    ``account:user``. Anything else is Keystone v3: ``user`` and ``project`` are names in
    their domains."""

    auth_url: str
    user: str
    password: str
    project: str
    insecure: bool = False
    user_domain: str = "Default"
    project_domain: str = "Default"
    user_domain_id: str | None = None
    project_domain_id: str | None = None
    region_name: str | None = None
    interface: str = "public"
    timeout: float = 10.0
    # See SwiftClient.create_settled and RecentQueueObjects.
    settle_ms: int = SWIFT_SETTLE_MS
    metadata_cache_ms: int = SWIFT_METADATA_CACHE_MS

    def times(self) -> SwiftTimes:
        """The driver's time bounds with this access's settle, cache and request timeout."""
        return SwiftTimes(self.settle_ms, self.metadata_cache_ms, int(self.timeout * 1000))

    @property
    def tempauth(self) -> bool:
        return self.auth_url.rstrip("/").endswith("v1.0")

    def connect(self) -> swiftclient.Connection:
        """A new connection as this access; it authenticates on its first request and again when
        its token is refused (one retry, at once)."""
        common: dict[str, Any] = {
            "retries": REQUEST_ATTEMPTS - 1,
            "starting_backoff": 0.01,
            "max_backoff": 0.05,
            "timeout": self.timeout,
            "insecure": self.insecure,
        }
        if self.tempauth:
            return swiftclient.Connection(
                authurl=self.auth_url,
                user=self.user,
                key=self.password,
                auth_version="1",
                **common,
            )
        from keystoneauth1 import session as ks_session
        from keystoneauth1.identity import v3

        auth = v3.Password(
            auth_url=self.auth_url,
            username=self.user,
            password=self.password,
            project_name=self.project,
            user_domain_id=self.user_domain_id,
            user_domain_name=None if self.user_domain_id else self.user_domain,
            project_domain_id=self.project_domain_id,
            project_domain_name=None if self.project_domain_id else self.project_domain,
        )
        session = ks_session.Session(auth=auth, verify=not self.insecure, timeout=self.timeout)
        options = {"endpoint_type": self.interface, "region_name": self.region_name}
        return swiftclient.Connection(session=session, os_options=options, **common)


# What a swift:// URI's query may set, overriding [drivers:message_store:swift]: a pool can
# name a Swift cluster of its own.
URI_OPTIONS: dict[str, Callable[[str], Any]] = {
    "auth_url": str,
    "settle_ms": int,
    "metadata_cache_ms": int,
    "insecure": lambda text: text.lower() in ("1", "true", "yes", "on"),
    "user_domain_name": str,
    "user_domain_id": str,
    "project_domain_name": str,
    "project_domain_id": str,
    "region_name": str,
    "interface": str,
}
_FIELDS = {"user_domain_name": "user_domain", "project_domain_name": "project_domain"}


def access_from_uri(uri: str, **options: Any) -> SwiftAccess:
    """The access a ``swift://USER:PASSWORD@/PROJECT`` URI names (user and password
    percent-encoded: ``test%3Atester`` for tempauth's ``test:tester``). ``options`` are the
    configured defaults; the URI's query may override any of ``URI_OPTIONS``."""
    try:
        parts = urllib.parse.urlsplit(uri)
        user, password = parts.username, parts.password
        query = urllib.parse.parse_qs(parts.query, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise errors.StorageConfigError(f"Invalid storage URI: {exc}") from exc
    if parts.scheme not in SCHEMES or not user or password is None:
        raise errors.StorageConfigError(
            "Invalid Swift storage URI: use swift://USER:PASSWORD@/PROJECT, the user "
            "percent-encoded (swift://test%3Atester:testing@/test for tempauth)"
        )
    unknown = sorted(set(query) - set(URI_OPTIONS))
    if unknown:
        raise errors.StorageConfigError(
            f"Invalid Swift storage URI: unknown option {unknown[0]!r} (known: "
            f"{', '.join(URI_OPTIONS)})"
        )
    settings = {key: value for key, value in options.items() if value is not None}
    for key, values in query.items():
        try:
            settings[_FIELDS.get(key, key)] = URI_OPTIONS[key](values[-1])
        except ValueError as exc:
            raise errors.StorageConfigError(
                f"Invalid Swift storage URI: {key} = {values[-1]!r}: {exc}"
            ) from exc
    if not settings.get("auth_url"):
        raise errors.StorageConfigError(
            "A swift:// storage URI needs [drivers:message_store:swift] auth_url (Keystone v3, "
            "or a tempauth URL ending in /auth/v1.0)"
        )
    return SwiftAccess(
        user=urllib.parse.unquote(user),
        password=urllib.parse.unquote(password),
        project=urllib.parse.unquote(parts.path.lstrip("/")),
        **settings,
    )
