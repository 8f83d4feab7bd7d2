"""How an option is declared: once, as the settings field that holds its value.

:func:`setting` registers the oslo.config option in :data:`GROUPS` (for the config files and
``oslo-config-generator``, through :mod:`zaqar_delay.opts`) and gives the field the option's
default. Each option group's settings live in a module of their own in this package."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from oslo_config import cfg

MIB = 1024 * 1024

# Every option by group, in the order of the sample file; setting() fills them in.
GROUPS: dict[str, list[cfg.Opt]] = {
    group: []
    for group in (
        "DEFAULT",
        "pooling:catalog",
        "server",
        "storage",
        "drivers:message_store:swift",
        "transport",
        "signed_url",
        "journal",
        "metrics",
        "notification",
        "drivers:transport:websocket",
    )
}
_OPTION = "option"


def setting(
    group: str,
    kind: Callable[..., cfg.Opt],
    name: str,
    *,
    convert: Callable[[Any], Any] | None = None,
    **option: Any,
) -> Any:
    """Declare the option ``[group] name`` (``kind(name, **option)``) and the settings field
    that holds its value. The field's default is the option's default; ``convert`` turns the
    option's value, the default and each configured one, into the field's (a list into a
    tuple, MiB into bytes)."""
    opt = kind(name, **option)
    GROUPS[group].append(opt)
    read = convert or _same
    return dataclasses.field(default=read(opt.default), metadata={_OPTION: (group, opt.dest, read)})


def _same(value: Any) -> Any:
    return value


def mib(value: int) -> int:
    """MiB in bytes."""
    return value * MIB


def options_of(cls: type[Any], conf: cfg.ConfigOpts) -> dict[str, Any]:
    """The values of the fields of ``cls`` that :func:`setting` declared, as ``conf`` has
    them."""
    values = {}
    for field in dataclasses.fields(cls):
        if _OPTION in field.metadata:
            group, dest, read = field.metadata[_OPTION]
            section = conf if group == "DEFAULT" else getattr(conf, group)
            values[field.name] = read(getattr(section, dest))
    return values
