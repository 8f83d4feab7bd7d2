"""The entry point of ``oslo-config-generator`` (namespace ``zaqar_delay``): every option of
the service, as :mod:`zaqar_delay.conf` declares them with the settings fields they fill."""

from __future__ import annotations

from oslo_config import cfg

from zaqar_delay.conf import GROUPS


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """Every option, by group, in the order of the sample file."""
    return [(group, list(opts)) for group, opts in GROUPS.items()]
