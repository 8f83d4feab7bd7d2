"""The JSON-patch subset Zaqar accepts for queue metadata: add, remove, replace /metadata/key."""

from __future__ import annotations

import dataclasses
from typing import Any

from zaqar_delay import errors
from zaqar_delay.models import Metadata

OPERATIONS = ("add", "remove", "replace")


@dataclasses.dataclass(frozen=True, slots=True)
class Operation:
    op: str
    key: str
    value: Any


def _unescape(segment: str) -> str:
    return segment.replace("~1", "/").replace("~0", "~")


def _pointer_key(path: Any) -> str:
    if not isinstance(path, str):
        raise errors.InvalidBody("Unable to find 'path' in JSON Schema change")
    invalid = errors.InvalidBody(
        f"Invalid JSON pointer for this resource: '{path}', e.g /metadata/key"
    )
    if not path.startswith("/") or "//" in path or path.endswith("/"):
        raise invalid
    segments = path[1:].split("/")
    for segment in segments:
        stripped = segment.replace("~0", "").replace("~1", "")
        if "~" in stripped:
            raise invalid
    if len(segments) != 2:
        raise invalid
    if segments[0].lower() != "metadata":
        raise errors.InvalidBody("The root of path must be metadata, e.g /metadata/key.")
    return _unescape(segments[1])


def parse(document: Any) -> list[Operation]:
    """Check a decoded patch document; InvalidBody describes the first problem found."""
    if not isinstance(document, list):
        raise errors.InvalidBody("Request body must be a JSON array of operation objects.")
    operations = []
    for item in document:
        if not isinstance(item, dict):
            raise errors.InvalidBody("Operations must be JSON objects.")
        op = item.get("op")
        if op is None:
            raise errors.InvalidBody(
                "Unable to find `op` in JSON Schema change. It must be one of the following: "
                "add, remove, replace."
            )
        if op not in OPERATIONS:
            raise errors.InvalidBody(
                f"Invalid operation: `{op}`. It must be one of the following: add, remove, replace."
            )
        if "path" not in item:
            raise errors.InvalidBody("Unable to find 'path' in JSON Schema change")
        key = _pointer_key(item["path"])
        if op != "remove" and "value" not in item:
            raise errors.InvalidBody(f'Operation "{op}" requires a member named "value".')
        operations.append(Operation(op, key, item.get("value")))
    return operations


def apply(metadata: Metadata, operations: list[Operation]) -> Metadata:
    """The metadata after the operations; Conflict for replace/remove of an absent plain key."""
    result = dict(metadata)
    for operation in operations:
        reserved = operation.key.startswith("_")
        if operation.op == "add":
            result[operation.key] = operation.value
        elif operation.op == "replace":
            if operation.key not in result and not reserved:
                raise errors.Conflict(f"Can't replace non-existent object {operation.key}.")
            result[operation.key] = operation.value
        elif operation.key in result:
            del result[operation.key]
        elif not reserved:
            raise errors.Conflict(f"Can't remove non-existent object {operation.key}.")
    return result
