"""Listing markers: the opaque strings in "next" links, checked the same way by every driver."""

from __future__ import annotations

from zaqar_delay import errors


def _invalid() -> errors.InvalidParameter:
    return errors.InvalidParameter(
        'The "marker" parameter is invalid. It must be a marker from a "next" link.'
    )


def _is_digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


# Sequence numbers stay far below 10**15; message ids are longer (16 hex digits and a suffix).
_MAX_SEQUENCE_DIGITS = 15


def posting(marker: str | None) -> int | str | None:
    """What a posting-order marker names: the sequence number of a "next" link (an int), or
    else a message id to list after (a str), as Zaqar accepts; None for the first page.

    Never refused: like Zaqar, a marker that names nothing known lists from the start, so the
    driver looks a str up and falls back to the first page when no such message exists.
    """
    if not marker:
        return None
    if _is_digits(marker) and len(marker) <= _MAX_SEQUENCE_DIGITS:
        return int(marker)
    return marker


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
