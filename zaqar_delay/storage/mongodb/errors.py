"""Turns pymongo failures into the service's storage errors."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from pymongo import errors as mongo_errors

from zaqar_delay.errors import StorageUnavailable

P = ParamSpec("P")
R = TypeVar("R")

# Outages and failovers, as opposed to bugs: the request may succeed when retried later.
TRANSIENT = (
    mongo_errors.ConnectionFailure,  # includes AutoReconnect, NetworkTimeout, NotPrimaryError
    mongo_errors.ServerSelectionTimeoutError,
    mongo_errors.ExecutionTimeout,
    mongo_errors.WTimeoutError,
)


def translate_errors(method: Callable[P, R]) -> Callable[P, R]:
    """Re-raise transient MongoDB failures as StorageUnavailable (503); others propagate."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except TRANSIENT as exc:
            raise StorageUnavailable(f"MongoDB is unavailable: {exc}") from exc
        except mongo_errors.PyMongoError as exc:
            transient_label = exc.has_error_label("TransientTransactionError")
            if exc.timeout or transient_label:  # a bounded operation ran out of time
                raise StorageUnavailable(f"MongoDB is unavailable: {exc}") from exc
            raise

    return wrapper


C = TypeVar("C", bound=type)


def translate_class_errors(cls: C) -> C:
    """:func:`translate_errors` on every public method the class itself defines."""
    for name, attribute in list(vars(cls).items()):
        if not name.startswith("_") and callable(attribute):
            setattr(cls, name, translate_errors(attribute))
    return cls
