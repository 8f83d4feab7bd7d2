"""The claim slots that decide who holds a message on Swift.

A message's claims are numbered slots, ``<p>/<q>/m/<id>/<n>`` in the claims container, each
created only if absent (``If-None-Match: *``). Taking slot n + 1 is the one atomic step of a
claim: of any number of claimers, exactly one creates it. An index entry records the claim
count ``n`` it was written at, so a claimer reads slot ``n + 1`` and, absent, creates it; if a
claim was taken since, that slot exists and the entry is stale. (Read first: an update of the
slot hides it from a create-only write at that moment; see ``TakeOps._take_through``.) A slot
holds the claim's id, its expiry (0 once released or left) and the claim count (``cc``),
which a slot voided before its message was handed out does not raise.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from typing import Any

from zaqar_delay.storage.swift import names


@dataclasses.dataclass(frozen=True, slots=True)
class Slot:
    """A message's latest claim slot: number ``n`` (0 for never claimed), the claim count,
    and the claim that holds it until ``expires_ms`` (0: released, or never)."""

    n: int = 0
    claim_count: int = 0
    claim_id: str = ""
    expires_ms: int = 0
    # When a claim took it (0: unknown, or not taken by a claim).
    taken_ms: int = 0
    # Makes each writer's document its own, so a creator can tell whether its write is kept.
    nonce: str = dataclasses.field(default_factory=lambda: secrets.token_hex(8), compare=False)

    def live(self, now_ms: int) -> bool:
        return bool(self.claim_id) and self.expires_ms > now_ms

    def document(self) -> bytes:
        return json.dumps(
            {
                "c": self.claim_id,
                "e": self.expires_ms,
                "cc": self.claim_count,
                "t": self.taken_ms,
                "k": self.nonce,
            }
        ).encode()

    def content_type(self) -> str:
        return names.content_type(c=self.claim_id, e=self.expires_ms, cc=self.claim_count)


def slot_from_document(n: int, document: bytes) -> Slot:
    """Slot ``n`` as :meth:`Slot.document` stored it."""
    doc = json.loads(document)
    return Slot(n, int(doc["cc"]), str(doc["c"]), int(doc["e"]), int(doc.get("t", 0)))


def slot_from_listing(entry: dict[str, Any]) -> Slot:
    fields = names.fields_of(entry["content_type"])
    return Slot(
        n=int(entry["name"].rsplit("/", 1)[1]),
        claim_count=int(fields.get("cc", 0)),
        claim_id=fields.get("c", ""),
        expires_ms=int(fields.get("e", 0)),
    )
