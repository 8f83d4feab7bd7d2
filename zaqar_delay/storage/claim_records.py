"""A claim as MongoDB and Swift keep it: one record whose ``t`` and ``g`` are its ttl and
grace (s), ``u`` when it was made or last renewed and ``e`` when it expires (ms), beside
the messages it holds, which each store finds its own way."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from zaqar_delay.models import Claim, Message


def claim_of(claim_id: str, record: Mapping[str, Any], held: Iterable[Message]) -> Claim:
    """The live claim ``record`` describes, holding ``held`` (in the order given)."""
    return Claim(
        claim_id,
        ttl_s=int(record["t"]),
        grace_s=int(record["g"]),
        updated_ms=int(record["u"]),
        expires_ms=int(record["e"]),
        messages=tuple(held),
    )
