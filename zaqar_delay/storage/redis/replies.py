"""Decoding what the Lua scripts answer: messages and claim refusals."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from zaqar_delay import errors
from zaqar_delay.models import Message
from zaqar_delay.storage.redis import layout

# The claim refusals of lua/lib.lua's claim_check, as the scripts' replies arrive.
_CLAIMED, _NOT_CLAIMED, _BAD_CLAIM = (
    refusal.encode()
    for refusal in (layout.REFUSED_CLAIMED, layout.REFUSED_NOT_CLAIMED, layout.REFUSED_BAD_CLAIM)
)


def text(value: bytes | str | int) -> str:
    """A string a script or command answered: bytes (the client's default), or already text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def message_of(
    id_: bytes, body: bytes, record: bytes, claim: bytes, claim_expires: int, now_ms: int
) -> Message:
    """Decode one message: what lua/lib.lua's ``emit`` returns for it."""
    created, expires, due, ttl, claim_count, kind = layout.RECORD_HEAD.unpack_from(record)
    at = layout.RECORD_HEAD.size
    at += 1 + record[at] if kind & layout.KIND_ID_KEPT else layout.ID_RANDOM_BYTES
    hops = 0
    if kind & layout.KIND_HOPS:
        hops, at = record[at], at + 1
    if kind & layout.KIND_CLIENT_PACKED:
        client = record[at:].hex()
    elif kind & layout.KIND_CLIENT_DASHED:
        client = str(uuid.UUID(bytes=record[at:]))
    else:
        client = record[at:].decode()
    live_claim = claim.decode() if claim and int(claim_expires) > now_ms else None
    return Message(
        id=id_.decode(),
        body=json.loads(body),
        ttl_s=ttl,
        created_ms=created,
        expires_ms=expires,
        due_ms=due,
        claim_id=live_claim,
        claim_count=claim_count,
        client_id=client,
        hops=hops,
    )


def messages_of(flat: Sequence[Any], now_ms: int) -> list[Message]:
    """Decode the messages a script returns, five values each (lua/lib.lua's ``emit``)."""
    return [
        message_of(flat[i], flat[i + 1], flat[i + 2], flat[i + 3], flat[i + 4], now_ms)
        for i in range(0, len(flat), 5)
    ]


def raise_claim_refusal(outcome: bytes) -> None:
    """Raise what a script's claim_check refusal (lua/lib.lua) means; "ok" passes."""
    if outcome == _CLAIMED:
        raise errors.MessageIsClaimed()
    if outcome == _NOT_CLAIMED:
        raise errors.ClaimNotValid(
            "A claim was specified, but the message is not currently claimed."
        )
    if outcome == _BAD_CLAIM:
        raise errors.ClaimNotValid("The specified claim does not exist or has expired.")


def removed_ids(outcome: bytes | list[bytes]) -> list[str]:
    """The ids delete_many.lua removed; its claim refusal (a single reply) is raised."""
    if isinstance(outcome, bytes):
        raise_claim_refusal(outcome)
        return []
    return [removed.decode() for removed in outcome]
