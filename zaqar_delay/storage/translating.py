"""Applying a driver's error translation to a whole class at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

C = TypeVar("C", bound=type)


def on_public_methods(decorator: Callable[[Any], Any]) -> Callable[[C], C]:
    """A class decorator applying ``decorator`` to every public method the class itself
    defines (not inherited ones: their own class has them decorated already)."""

    def apply(cls: C) -> C:
        for name, attribute in list(vars(cls).items()):
            if not name.startswith("_") and callable(attribute):
                setattr(cls, name, decorator(attribute))
        return cls

    return apply
