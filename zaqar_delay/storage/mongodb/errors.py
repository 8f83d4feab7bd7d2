"""Turns pymongo failures into the service's storage errors."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from pymongo import errors as mongo_errors

from zaqar_delay.errors import StorageUnavailable, WriteNotReplicated
from zaqar_delay.storage.translating import on_public_methods

P = ParamSpec("P")
R = TypeVar("R")

# Outages and failovers, as opposed to bugs: the request may succeed when retried later.
TRANSIENT = (
    mongo_errors.ConnectionFailure,  # includes AutoReconnect, NetworkTimeout, NotPrimaryError
    mongo_errors.ServerSelectionTimeoutError,
    mongo_errors.ExecutionTimeout,
    mongo_errors.WTimeoutError,
)

# MongoDB's error code for a unique index refusing a document.
DUPLICATE_KEY = 11000


def duplicate_positions(exc: mongo_errors.BulkWriteError) -> list[int] | None:
    """The positions of the documents an unordered bulk insert refused as duplicates of a
    unique key; None when any write failed for another reason."""
    write_errors = exc.details.get("writeErrors", [])
    if any(error.get("code") != DUPLICATE_KEY for error in write_errors):
        return None
    return [int(error["index"]) for error in write_errors]


def translate_errors(method: Callable[P, R]) -> Callable[P, R]:
    """Re-raise transient MongoDB failures as StorageUnavailable (503); others propagate."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except mongo_errors.WriteConcernError as exc:
            # The primary made the write; too few members confirmed it (in time, or at all:
            # the set has lost members since the server started).
            raise _not_replicated(exc) from exc
        except TRANSIENT as exc:
            raise StorageUnavailable(f"MongoDB is unavailable: {exc}") from exc
        except mongo_errors.PyMongoError as exc:
            transient_label = exc.has_error_label("TransientTransactionError")
            if exc.timeout or transient_label:  # a bounded operation ran out of time
                raise StorageUnavailable(f"MongoDB is unavailable: {exc}") from exc
            raise

    return wrapper


#: The class decorator: :func:`translate_errors` on every public method the class defines.
translate_class_errors = on_public_methods(translate_errors)


def _not_replicated(exc: mongo_errors.WriteConcernError) -> WriteNotReplicated:
    return WriteNotReplicated(f"the replica set did not confirm it ({exc})")
