"""A push owed on Swift as its index entries name it (``pushes.py`` keeps the entries)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from zaqar_delay.storage.push_leasing import PushIdentity
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.common import Doc


@dataclasses.dataclass(frozen=True, slots=True)
class Owed(PushIdentity):
    """One push as its index entries name it."""

    push_id: str
    at_ms: int
    attempts: int = 0
    leases: int = 0
    reserved: str = ""  # the time its rate reserved for it
    parked_from: str = ""  # parked: the time it was owed at before
    slot: str = ""  # the slot of its rate that time is of

    def content_type(self) -> str:
        return names.content_type(
            a=self.attempts, k=self.leases, r=self.reserved, o=self.parked_from, s=self.slot
        )

    def rate_slot(self) -> int | None:
        """The slot of its rate the push holds, when it is owed at that slot's time: ``s``,
        or ``r`` itself where a reservation made before rates had an offset left no ``s``."""
        if self.reserved != str(self.at_ms):
            return None
        return int(self.slot or self.reserved)


def owed_of(name: str, content_type: str) -> Owed:
    """The push the index entry ``name`` (either kind) with ``content_type`` names."""
    at, push_id = name.rsplit("/", 2)[1:]
    fields = names.fields_of(content_type)
    return Owed(
        push_id,
        int(at),
        int(fields["a"]),
        int(fields["k"]),
        fields.get("r", ""),
        fields.get("o", ""),
        fields.get("s", ""),
    )


def owed_for(stored: Sequence[tuple[str, Doc]], subscriptions: Sequence[str]) -> list[Owed]:
    """The pushes of the ``stored`` (message id, document) to ``subscriptions``, each owed
    at its message's due time."""
    return [
        Owed(f"{sid}:{message_id}", int(doc["d"]))
        for sid in subscriptions
        for message_id, doc in stored
    ]
