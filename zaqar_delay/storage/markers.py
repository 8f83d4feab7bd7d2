"""Listing markers: the opaque strings in "next" links, checked the same way by every driver."""

from __future__ import annotations

from zaqar_delay import errors


def _invalid() -> errors.InvalidParameter:
    return errors.InvalidParameter(
        'The "marker" parameter is invalid. It must be a marker from a "next" link.'
    )


def _is_digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def posting(marker: str | None) -> int | None:
    """The sequence number a posting-order marker names."""
    if marker is None:
        return None
    if not _is_digits(marker):
        raise _invalid()
    return int(marker)


def due(marker: str | None) -> tuple[int, str] | None:
    """The (due_ms, tiebreak) a due-order marker ``"<due>-<tiebreak>"`` names."""
    if marker is None:
        return None
    due_ms, _, tiebreak = marker.partition("-")
    if not (_is_digits(due_ms) and tiebreak.isascii() and tiebreak.isalnum()):
        raise _invalid()
    return int(due_ms), tiebreak


def make_due(due_ms: int, tiebreak: str | int) -> str:
    return f"{due_ms}-{tiebreak}"
