"""Decoding what the Lua scripts answer: messages and claim refusals."""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Sequence
from typing import Any

from zaqar_delay import errors
from zaqar_delay.models import Message

# A message record (lua/lib.lua): created ms, expires ms, due ms, ttl s, claim count, kind;
# then the id part and the client id.
_RECORD_HEAD = struct.Struct(">QQQIHB")
_KIND_CLIENT_PACKED, _KIND_ID_KEPT, _KIND_CLIENT_DASHED = 1, 2, 4
_ID_RANDOM_BYTES = 8


def message_of(
    id_: bytes, body: bytes, record: bytes, claim: bytes, claim_expires: int, now_ms: int
) -> Message:
    """Decode one message: what lua/lib.lua's ``emit`` returns for it."""
    created, expires, due, ttl, claim_count, kind = _RECORD_HEAD.unpack_from(record)
    at = _RECORD_HEAD.size
    at += 1 + record[at] if kind & _KIND_ID_KEPT else _ID_RANDOM_BYTES
    if kind & _KIND_CLIENT_PACKED:
        client = record[at:].hex()
    elif kind & _KIND_CLIENT_DASHED:
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
    )


def messages_of(flat: Sequence[Any], now_ms: int) -> list[Message]:
    """Decode the messages a script returns, five values each (lua/lib.lua's ``emit``)."""
    return [
        message_of(flat[i], flat[i + 1], flat[i + 2], flat[i + 3], flat[i + 4], now_ms)
        for i in range(0, len(flat), 5)
    ]


def raise_claim_refusal(outcome: bytes) -> None:
    """Raise what a script's claim_check refusal (lua/lib.lua) means; "ok" passes."""
    if outcome == b"claimed":
        raise errors.MessageIsClaimed()
    if outcome == b"not_claimed":
        raise errors.ClaimNotValid(
            "A claim was specified, but the message is not currently claimed."
        )
    if outcome == b"bad_claim":
        raise errors.ClaimNotValid("The specified claim does not exist or has expired.")
