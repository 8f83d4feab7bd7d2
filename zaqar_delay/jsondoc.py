"""Strict JSON decoding of request bodies: anything hostile becomes a 400, never a 500."""

from __future__ import annotations

import json
import math
from typing import Any

from zaqar_delay import errors


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    """A JSON number with a fraction or an exponent, refused when a float cannot hold it:
    ``1e400`` would decode to infinity and be stored and answered as ``Infinity``, which is
    not JSON and which strict clients cannot read."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is out of range for a JSON number")
    return value


# The deepest a request body's objects and arrays may nest. What is stored is decoded and
# encoded again later, from deeper in the stack (a store's reply, a push, a WebSocket answer):
# a document the parser just took at ~960 levels made every post to its queue answer 500.
# At 512 those keep about half of the 1,000 calls Python's recursion limit allows.
MAX_DEPTH = 512
_CONTAINERS = (dict, list)


def loads(payload: bytes) -> Any:
    """Decode a UTF-8 JSON document.

    Invalid UTF-8, malformed JSON, NaN/Infinity, numbers beyond a float's range (``1e400``),
    nesting too deep for the parser and integers too long to convert all raise
    InvalidBody("Request body could not be parsed."); nesting deeper than ``MAX_DEPTH``
    levels raises InvalidBody saying so.
    """
    try:
        document = json.loads(
            payload.decode("utf-8"), parse_constant=_refuse_constant, parse_float=_finite_float
        )
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise errors.InvalidBody("Request body could not be parsed.") from exc
    # It cannot nest deeper than it has brackets: counted in C, most bodies need no walk.
    brackets = payload.count(b"[") + payload.count(b"{")
    if brackets > MAX_DEPTH and nests_deeper(document, MAX_DEPTH):
        raise errors.InvalidBody(
            f"Request body could not be parsed: it nests more than {MAX_DEPTH} levels deep."
        )
    return document


def is_unicode(document: Any) -> bool:
    """Whether every string of a decoded document, keys too, is Unicode text. A ``"\\ud800"``
    escape decodes to a lone surrogate, which only a JSON escape can carry: not UTF-8, so
    not a store that keeps the string as text."""
    try:
        json.dumps(document, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# One encoder for every call: json.dumps() with options builds a new one each time.
# ASCII output: a lone surrogate from a "\\ud800" escape stays an escape, never bad UTF-8.
_COMPACT = json.JSONEncoder(separators=(",", ":"))


def dumps(document: Any) -> str:
    """Compact JSON, the form bodies are stored and sent in."""
    return _COMPACT.encode(document)


def nests_deeper(document: Any, levels: int) -> bool:
    """Whether ``document`` (decoded JSON or MessagePack: dicts, lists and scalars) holds
    containers more than ``levels`` deep, found level by level, without recursion."""
    level = [document] if isinstance(document, _CONTAINERS) else []
    for _ in range(levels):
        deeper: list[Any] = []
        for value in level:
            children = value.values() if isinstance(value, dict) else value
            deeper.extend([child for child in children if isinstance(child, _CONTAINERS)])
        if not deeper:
            return False
        level = deeper
    return bool(level)
