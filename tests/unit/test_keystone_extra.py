"""Keystone used without the keystone extra: each feature that needs it (the token check and
its start check, trusts, the catalog's public endpoints) fails at start with one line saying what to install,
never with an ImportError from inside the server."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
from oslo_config import cfg

from zaqar_delay.conf import Settings
from zaqar_delay.errors import StorageConfigError
from zaqar_delay.keystone.auth_token import check_configured, token_checked
from zaqar_delay.keystone.catalog import PublicEndpoints
from zaqar_delay.keystone.trusts import trusts_of

FEATURES: dict[str, Callable[[], object]] = {
    "token check": lambda: token_checked(lambda environ, start: [], Settings()),
    "the token check's start check": lambda: check_configured(Settings()),
    "trusts": lambda: trusts_of(cfg.ConfigOpts()),
    "catalog": lambda: PublicEndpoints(cfg.ConfigOpts()),
}


@pytest.mark.parametrize("feature", FEATURES)
def test_a_feature_of_the_extra_without_it_says_what_to_install(
    feature: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As a core install has them: neither distribution importable.
    for module in ("keystoneauth1", "keystonemiddleware"):
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ImportError):
        import keystoneauth1  # noqa: F401
    with pytest.raises(StorageConfigError) as refused:
        FEATURES[feature]()
    assert "pip install 'zaqar-delay[keystone]'" in refused.value.description
