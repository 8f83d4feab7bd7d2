"""The rules a change of one stored message follows on every store that checks them in Python
(MongoDB, Swift; Redis checks the same in ``lua/lib.lua``): whether a claim lets it happen, and
the expiry a new ttl gives it; and the field their message documents keep hops in."""

from __future__ import annotations

from collections.abc import Callable

from zaqar_delay import errors
from zaqar_delay.models import MessageEdit


def check_claim(holder: str | None, claim_id: str | None, is_live: Callable[[str], bool]) -> None:
    """Refuse a change to a message held by the live claim ``holder`` (None: no live claim
    holds it) unless ``claim_id`` names that claim (``Driver.delete_message``'s rules):
    MessageIsClaimed when another live claim holds it, ClaimNotValid when the message is not
    claimed or ``claim_id`` is not live. ``is_live(claim_id)`` is asked only when another
    claim holds the message."""
    if claim_id is None:
        if holder is not None:
            raise errors.MessageIsClaimed()
        return
    if holder is None:
        raise errors.ClaimNotValid(
            "A claim was specified, but the message is not currently claimed."
        )
    if holder != claim_id:
        if is_live(claim_id):
            raise errors.MessageIsClaimed()
        raise errors.ClaimNotValid("The specified claim does not exist or has expired.")


def edited_expiry(edit: MessageEdit, created_ms: int, now_ms: int) -> int | None:
    """The expiry ``edit``'s new ttl gives a message created at ``created_ms`` (None: the edit
    keeps its ttl); TtlAlreadyLapsed when that is not after ``now_ms``, before anything is
    written (``Driver.edit_message``)."""
    if edit.ttl_s is None:
        return None
    expires = created_ms + edit.ttl_s * 1000
    if expires <= now_ms:
        raise errors.TtlAlreadyLapsed(edit.ttl_s)
    return expires


def hops_field(hops: int) -> dict[str, int]:
    """The field of a MongoDB or Swift message document holding ``NewMessage.hops``: none for
    0 (the message as a client posted it; documents stored before the field read as 0)."""
    return {"h": hops} if hops else {}
