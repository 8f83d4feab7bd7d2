"""What needs the keystone extra (``pip install 'zaqar-delay[keystone]'``): keystonemiddleware's
token check (``auth_token``), Keystone trusts for ``trust+`` subscribers (``trusts``) and Zaqar's
public endpoints in Keystone's catalog (``catalog``)."""

from __future__ import annotations

from types import ModuleType

from zaqar_delay.errors import StorageConfigError

EXTRA = "pip install 'zaqar-delay[keystone]'"


def without_the_extra(exc: ImportError) -> StorageConfigError:
    """What a deployment that uses keystone without the extra is told: what to install."""
    return StorageConfigError(f"auth_strategy = keystone needs the keystone extra ({EXTRA}): {exc}")


def keystoneauth_loading() -> ModuleType:
    """``keystoneauth1.loading`` (StorageConfigError without the extra)."""
    try:
        from keystoneauth1 import loading
    except ImportError as exc:
        raise without_the_extra(exc) from exc
    return loading
