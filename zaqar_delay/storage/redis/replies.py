"""Decoding what the Lua scripts answer: messages and claim refusals."""

from __future__ import annotations

import json
from collections.abc import Sequence

import msgpack

from zaqar_delay import errors
from zaqar_delay.models import Message


def message_of(id_: bytes, body: bytes, raw_info: bytes, now_ms: int) -> Message:
    created, expires, ttl, due, client, _seq, claim, claim_expires, claim_count = msgpack.unpackb(
        raw_info
    )
    live_claim = claim if claim and claim_expires > now_ms else None
    return Message(
        id=id_.decode(),
        body=json.loads(body),
        ttl_s=int(ttl),
        created_ms=int(created),
        expires_ms=int(expires),
        due_ms=int(due),
        claim_id=live_claim,
        claim_count=int(claim_count),
        client_id=client,
    )


def messages_of(flat: Sequence[bytes], now_ms: int) -> list[Message]:
    """Decode the ``id, body, info`` triples a script returns."""
    return [message_of(flat[i], flat[i + 1], flat[i + 2], now_ms) for i in range(0, len(flat), 3)]


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
