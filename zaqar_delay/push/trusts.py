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

This module's names serve every deployment's pushes, noauth ones too; the trusts themselves
are ``zaqar_delay.keystone.trusts`` (the keystone extra).
"""

from __future__ import annotations

import dataclasses

PREFIX = "trust+"
TRUST_ID = "trust_id"
# The user whose trust a subscription holds: only they may change or delete it.
TRUSTOR_ID = "trustor_id"
SERVICE_OPTIONS = (TRUST_ID, TRUSTOR_ID)


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
