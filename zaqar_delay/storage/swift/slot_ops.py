"""What the Swift driver does with a message's claim slots (``slots.py``): takes, reads and
voids them, checks a change against the claim holding the message, and removes the message
with its entries and slots."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from zaqar_delay.storage.message_rules import check_claim
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.common import Doc, SwiftBase
from zaqar_delay.storage.swift.slots import Slot, slot_from_document, slot_from_listing


class SlotOps(SwiftBase):
    """The claim-slot operations claims and message changes share."""

    def _slot_name(self, project: str, queue: str, message_id: str, n: int) -> str:
        return self._slots_prefix(project, queue, message_id) + names.number_part(n)

    def _take_slot(self, project: str, queue: str, message_id: str, slot: Slot) -> bool:
        """Create slot ``slot.n``, as the one creator Swift keeps; False when it existed or a
        concurrent creator's is kept."""
        return self._swift.create_settled(
            self._container(names.CLAIMS),
            self._slot_name(project, queue, message_id, slot.n),
            slot.document(),
            slot.content_type(),
        )

    def _write_slot(self, project: str, queue: str, message_id: str, slot: Slot) -> None:
        self._swift.put(
            self._container(names.CLAIMS),
            self._slot_name(project, queue, message_id, slot.n),
            slot.document(),
            slot.content_type(),
        )

    def _read_slot(
        self, project: str, queue: str, message_id: str, n: int, *, known: bool = False
    ) -> Slot | None:
        """Slot ``n`` of the message, or None. ``known``: a slot an entry or a claim names,
        whose 404 is read again before it is believed (a renewal, a release or an edit
        overwrites a slot, and a read racing that may answer 404)."""
        found = self._swift.get(
            self._container(names.CLAIMS),
            self._slot_name(project, queue, message_id, n),
            newest=True,
            known=known,
        )
        return None if found is None else slot_from_document(n, found[1])

    def _current_slot(self, project: str, queue: str, message_id: str) -> Slot:
        """The message's latest slot, read from the slot itself (``Slot()``: never claimed);
        a slot once created is always found (``SwiftClient.latest_numbered``)."""
        n, found = self._swift.latest_numbered(
            self._container(names.CLAIMS), self._slots_prefix(project, queue, message_id)
        )
        return Slot() if found is None else slot_from_document(n, found[1])

    def _slots_of(self, project: str, queue: str, message_ids: Sequence[str]) -> dict[str, Slot]:
        """The latest slot of each message as listings show it (claim count and holder for
        display; decisions read :meth:`_current_slot`)."""
        if not message_ids:
            return {}
        prefix = f"{names.queue_prefix(project, queue)}m/"
        ordered = sorted(message_ids)
        if len(ordered) <= 2:
            listed: Iterable[dict[str, Any]] = [
                entry
                for message_id in ordered
                for entry in self._swift.listing(
                    self._container(names.CLAIMS), f"{prefix}{message_id}/"
                )
            ]
        else:
            listed = self._swift.walk(
                self._container(names.CLAIMS),
                prefix,
                marker=f"{prefix}{ordered[0]}",
                end_marker=f"{prefix}{ordered[-1]}/~",
            )
        wanted = set(message_ids)
        slots: dict[str, Slot] = {}
        for entry in listed:
            message_id = entry["name"][len(prefix) :].split("/", 1)[0]
            if message_id in wanted:
                slots[message_id] = slot_from_listing(entry)  # name order: the last is latest
        return slots

    def _live_claim(self, project: str, queue: str, claim_id: str, now_ms: int) -> Doc | None:
        """The claim a client names, if live; a 404 is read again (``known``): a renewal
        overwrites the claim, and a read racing it may answer 404."""
        found = self._swift.get(
            self._container(names.CLAIMS), self._claim_name(project, queue, claim_id), known=True
        )
        if found is None:
            return None
        doc = dict(json.loads(found[1]))
        return doc if int(doc["e"]) > now_ms else None

    def _holding_slot(
        self, project: str, queue: str, message_id: str, n: int, claim_id: str, now_ms: int
    ) -> Slot | None:
        """Slot ``n`` of the message when ``claim_id``'s live claim holds the message through
        it: the slot is the claim's, live, and the message's latest (no slot after it). The
        claim's own slot is known to exist; the one after it usually does not."""
        later = self._swift.submit(self._read_slot, project, queue, message_id, n + 1)
        slot = self._read_slot(project, queue, message_id, n, known=True)
        if slot is None or slot.claim_id != claim_id or not slot.live(now_ms):
            return None
        return slot if later.result() is None else None

    def _slot_numbers(self, project: str, queue: str, claim_id: str) -> dict[str, int] | None:
        """{message id: slot number} of the messages the claim took (never changed after the
        claim is made, so known once read), or None when there is no such claim."""
        name = self._claim_name(project, queue, claim_id)
        known = self._claim_slots.get(name)
        if known is not None:
            return known
        found = self._swift.get(self._container(names.CLAIMS), name, known=True)
        if found is None:
            return None
        numbers = {str(i): int(n) for i, n in dict(json.loads(found[1])["m"]).items()}
        self._claim_slots.learn(name, numbers)
        return numbers

    def _check_claim(
        self, project: str, queue: str, slot: Slot, claim_id: str | None, now_ms: int
    ) -> None:
        """Refuse a change to a claimed message unless ``claim_id`` names its live claim."""
        holder = slot.claim_id if slot.live(now_ms) else None
        check_claim(holder, claim_id, lambda c: bool(self._live_claim(project, queue, c, now_ms)))

    def _remove_message(
        self,
        project: str,
        queue: str,
        message_id: str,
        doc: Doc | None,
        slot: Slot | None,
        held: bool = False,
        slots: int | None = None,
    ) -> None:
        """Delete the message, then what indexes it and its claim slots. A failure part-way
        leaves index entries without a message, which claimers remove when they meet them
        (``SwiftTimes.orphaned_after_ms``), or slots, which are never read again. ``held``:
        ``slot``'s live claim holds it, and that claim replaced its due entry with a claimed one, so
        only the latter is deleted (should the claimer have died before deleting the due
        entry, claimers remove it as any orphan). ``slots``: the number of its latest slot
        (0: it has none); by default ``slot``'s, else the slots are listed.

        A slot deleted after its message cannot hand the message out again: a claimer that
        creates a slot anew then finds no message and takes nothing."""
        self._swift.delete(
            self._container(names.MESSAGES), self._message_name(project, queue, message_id)
        )
        claims = self._container(names.CLAIMS)
        entries = []
        if doc is not None and not held and not doc.get("i"):
            entries.append(
                (names.INDEX, self._due_entry(project, queue, int(doc["d"]), message_id))
            )
        if slot is not None and slot.expires_ms:
            entries.append(
                (names.INDEX, self._claimed_entry(project, queue, slot.expires_ms, message_id))
            )
        highest = slot.n if slots is None and slot is not None else slots
        if highest is None:
            prefix = self._slots_prefix(project, queue, message_id)
            entries += [
                (names.CLAIMS, entry["name"]) for entry in self._swift.listing(claims, prefix)
            ]
        else:
            entries += [
                (names.CLAIMS, self._slot_name(project, queue, message_id, n))
                for n in range(1, highest + 1)
            ]
        self._swift.each(
            lambda item: self._swift.delete(self._container(item[0]), item[1]), entries
        )
