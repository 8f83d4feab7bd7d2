"""Strict JSON decoding of request bodies: anything hostile becomes a 400, never a 500."""

from __future__ import annotations

import json
from typing import Any

from zaqar_delay import errors


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads(payload: bytes) -> Any:
    """Decode a UTF-8 JSON document.

    Invalid UTF-8, malformed JSON, NaN/Infinity, nesting too deep for the parser and integers
    too long to convert all raise InvalidBody("Request body could not be parsed.").
    """
    try:
        return json.loads(payload.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise errors.InvalidBody("Request body could not be parsed.") from exc


# One encoder for every call: json.dumps() with options builds a new one each time.
# ASCII output: a lone surrogate from a "\\ud800" escape stays an escape, never bad UTF-8.
_COMPACT = json.JSONEncoder(separators=(",", ":"))


def dumps(document: Any) -> str:
    """Compact JSON, the form bodies are stored and sent in."""
    return _COMPACT.encode(document)
