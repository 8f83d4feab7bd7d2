"""Query-string parsing with Zaqar's conventions and error wording."""

from __future__ import annotations

import falcon

from zaqar_delay import errors

TRUE_STRINGS = frozenset(("true", "t", "yes", "y", "1", "on"))
FALSE_STRINGS = frozenset(("false", "f", "no", "n", "0", "off"))


def _value(req: falcon.Request, name: str) -> str | None:
    value = req.get_param(name)
    # Blank values (?limit=) count as absent, as in Zaqar.
    return value if value else None


def boolean(req: falcon.Request, name: str, default: bool = False) -> bool:
    """A boolean parameter; any spelling of true/false, case-insensitively."""
    value = _value(req, name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in TRUE_STRINGS:
        return True
    if lowered in FALSE_STRINGS:
        return False
    raise errors.InvalidParameter(
        f'The "{name}" parameter is invalid. The value of the parameter must be "true" or "false".'
    )


def schedule(req: falcon.Request) -> bool:
    """The ``with_schedule`` extension flag: show due times and claim counts."""
    return boolean(req, "with_schedule")


def sort_by_due(req: falcon.Request) -> bool:
    """The ``sort`` extension of listings: ``posted`` (Zaqar's order, the default) or ``due``."""
    value = _value(req, "sort")
    if value is None or value == "posted":
        return False
    if value == "due":
        return True
    raise errors.InvalidParameter('The "sort" parameter is invalid. It must be "posted" or "due".')


def integer(req: falcon.Request, name: str, default: int | None = None) -> int | None:
    value = _value(req, name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise errors.InvalidParameter(
            f'The "{name}" parameter is invalid. The value must be an integer.'
        ) from exc


def number(req: falcon.Request, name: str, default: float) -> float:
    value = _value(req, name)
    if value is None:
        return default
    try:
        parsed = float(value)
    except ValueError:
        parsed = float("nan")
    if parsed != parsed or parsed in (float("inf"), float("-inf")):
        raise errors.InvalidParameter(
            f'The "{name}" parameter is invalid. The value must be a number.'
        )
    return parsed


def text(req: falcon.Request, name: str) -> str | None:
    return _value(req, name)


def id_list(req: falcon.Request, name: str) -> list[str] | None:
    """A comma-separated list (literal or %2C-encoded commas), empty items dropped."""
    values = req.get_param_as_list(name)
    if not values:
        return None
    items = [item for value in values for item in value.split(",") if item]
    return items or None


def others(req: falcon.Request, known: frozenset[str]) -> dict[str, str]:
    """The query parameters not in ``known`` with a value (a repeated one: its last value)."""
    found = {}
    for name, value in req.params.items():
        last = value[-1] if isinstance(value, list) else value
        if name not in known and last:
            found[name] = str(last)
    return found
