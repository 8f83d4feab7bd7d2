"""How an option is declared: once, as the settings field that holds its value.

A settings class of an option group is a dataclass decorated with :func:`options`; each of its
fields made by :func:`option` is the oslo.config option of the same name (for the config files
and ``oslo-config-generator``, through :data:`GROUPS` and :mod:`zaqar_delay.opts`), and its
default is the option's default. Each option group's settings live in a module of their own in
this package."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from oslo_config import cfg

MIB = 1024 * 1024

# Every option by group, in the order of the sample file; options() fills them in.
GROUPS: dict[str, list[cfg.Opt]] = {
    group: []
    for group in (
        "DEFAULT",
        "pooling:catalog",
        "server",
        "storage",
        "drivers",
        "drivers:message_store:redis",
        "drivers:message_store:mongodb",
        "drivers:message_store:swift",
        "drivers:management_store:redis",
        "drivers:management_store:mongodb",
        "drivers:management_store:sqlalchemy",
        "drivers:transport:wsgi",
        "transport",
        "signed_url",
        "journal",
        "metrics",
        "notification",
        "drivers:transport:websocket",
    )
}
_OPTION = "option"
SettingsClass = TypeVar("SettingsClass", bound=type)


@dataclasses.dataclass(slots=True)
class _Declared:
    """An option as a field declares it; registered (``group``, ``dest``) by :func:`options`."""

    kind: Callable[..., cfg.Opt]
    arguments: dict[str, Any]
    read: Callable[[Any], Any]
    name: str | None
    group: str | None
    dest: str = ""

    def register(self, field_name: str, group: str) -> None:
        opt = self.kind(self.name or field_name, **self.arguments)
        self.group = self.group or group
        self.dest = opt.dest
        GROUPS[self.group].append(opt)


def option(
    kind: Callable[..., cfg.Opt],
    *,
    name: str | None = None,
    group: str | None = None,
    convert: Callable[[Any], Any] | None = None,
    **arguments: Any,
) -> Any:
    """A settings field holding the option ``kind(name, **arguments)``: ``name`` is the field's
    unless given, ``group`` its class's (:func:`options`) unless given. The field's default is
    the option's; ``convert`` turns the option's value, the default and each configured one,
    into the field's (a list into a tuple, MiB into bytes)."""
    read = convert or _same
    declared = _Declared(kind, arguments, read, name, group)
    return dataclasses.field(default=read(arguments.get("default")), metadata={_OPTION: declared})


def options(group: str) -> Callable[[SettingsClass], SettingsClass]:
    """Register in :data:`GROUPS` the options the fields of a settings dataclass declare, in
    ``group`` unless a field names its own."""

    def register(cls: SettingsClass) -> SettingsClass:
        for field in dataclasses.fields(cls):
            declared = field.metadata.get(_OPTION)
            if declared is not None:
                declared.register(field.name, group)
        return cls

    return register


def _same(value: Any) -> Any:
    return value


def mib(value: int) -> int:
    """MiB in bytes."""
    return value * MIB


def options_of(cls: type[Any], conf: cfg.ConfigOpts) -> dict[str, Any]:
    """The values of the fields of ``cls`` that :func:`option` declared, as ``conf`` has
    them."""
    values = {}
    for field in dataclasses.fields(cls):
        declared = field.metadata.get(_OPTION)
        if declared is not None:
            section = conf if declared.group == "DEFAULT" else getattr(conf, declared.group)
            values[field.name] = declared.read(getattr(section, declared.dest))
    return values
