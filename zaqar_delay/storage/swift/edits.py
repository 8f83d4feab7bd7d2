"""Edits of messages on Swift: a new body, ttl or due time written in place. A new due time
is fenced first (the claim it is made under ends, or an unclaimed message's next slot is
taken void), so no claimer that read the old due time takes the message; then the message
and its index entries are written in the order the life cycle's table gives
(``lifecycle.py``, "reschedule"). An earlier due time brings the message's pushes owed with
it forward (``Driver.edit_message``)."""

from __future__ import annotations

import dataclasses
import json

from zaqar_delay import errors
from zaqar_delay.models import MessageEdit
from zaqar_delay.storage.message_rules import edited_expiry
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.common import Doc
from zaqar_delay.storage.swift.owed import Owed
from zaqar_delay.storage.swift.pushes import PushOps
from zaqar_delay.storage.swift.slots import Slot

# Rounds an edit makes while concurrent claims take the message's next slot first.
EDIT_ATTEMPTS = 5


class EditOps(PushOps):
    """Edits of stored messages."""

    def edit_message(self, project: str, queue: str, edit: MessageEdit, now_ms: int) -> int:
        message_id, claim_id = edit.message_id, edit.claim_id
        for _ in range(EDIT_ATTEMPTS):
            doc = (
                self._read_message(project, queue, message_id, known=True)
                if names.is_message_id(message_id)
                else None
            )
            if doc is None or int(doc["e"]) <= now_ms:
                raise errors.MessageDoesNotExist(message_id, queue, project)
            slot = self._current_slot(project, queue, message_id)
            self._check_claim(project, queue, slot, claim_id, now_ms)
            changed = dict(doc)
            expires = edited_expiry(edit, int(doc["cr"]), now_ms)
            if expires is not None:
                changed.update({"t": edit.ttl_s, "e": expires})
            if edit.body_json is not None:
                changed["b"] = edit.body_json
            held = slot.live(now_ms)
            # A due time the message already has moves it only out of its claim: fencing an
            # unclaimed one would leave claimers to wait out the void slot.
            moved = edit.due_ms is not None and (held or edit.due_ms != int(doc["d"]))
            if moved:
                changed["d"] = edit.due_ms
                if not self._fence(project, queue, message_id, slot, now_ms):
                    continue  # a claim took the message meanwhile: decide again
            self._apply_edit(project, queue, message_id, (doc, changed), slot, held, moved)
            if edit.due_ms is None or edit.due_ms >= int(doc["d"]):
                return 0
            due = (edit.due_ms, int(doc["d"]))
            return self._bring_pushes_forward(project, queue, message_id, due, now_ms)
        raise errors.StorageUnavailable("The message could not be edited.")

    def _fence(self, project: str, queue: str, message_id: str, slot: Slot, now_ms: int) -> bool:
        """Before a new due time is written: end the claim the edit is made under (its slot
        expires now), or, for an unclaimed message, take its next slot as a void one, so a
        claimer that read the old due time cannot take it. False when a claim took that slot
        first."""
        if slot.live(now_ms):
            self._write_slot(project, queue, message_id, dataclasses.replace(slot, expires_ms=0))
            return True
        # Taken at now: claimers that meet the old entry leave it to this edit for a while.
        void = Slot(slot.n + 1, slot.claim_count, taken_ms=now_ms)
        return self._take_slot(project, queue, message_id, void)

    def _apply_edit(
        self,
        project: str,
        queue: str,
        message_id: str,
        versions: tuple[Doc, Doc],
        slot: Slot,
        held: bool,
        moved: bool,
    ) -> None:
        """Write the edited message (``versions``: as read, as edited) and the index entry
        that makes it claimable; ``held``: a live claim held it when read; ``moved``: it was
        fenced for a due time given (a new one, or its own to leave its claim). A message
        claimable by its name stays so unless moved: then it is indexed by a due entry, as
        its name no longer tells when it is due."""
        doc, changed = versions
        if moved:
            changed = {**changed, "i": 0}
            if doc.get("i"):
                # Indexed by a due entry at its old time first (naming the slot before the
                # edit's void one, which claimers then lose to): should the edit stop once
                # the message is written unnamed, that entry is what leads claimers to it,
                # and their repair indexes it at its new time.
                self._write_due_entry(project, queue, message_id, doc, slot)
        self._write_message(project, queue, message_id, changed)
        if moved:
            # It left its claim, if any, and is due at the new time; the void slot (or the
            # ended claim's) is now its latest.
            latest = slot if held else Slot(slot.n + 1, slot.claim_count)
            self._write_due_entry(project, queue, message_id, changed, latest)
            new = self._due_entry(project, queue, int(changed["d"]), message_id)
            old = [self._due_entry(project, queue, int(doc["d"]), message_id)]
            if held:
                old.append(self._claimed_entry(project, queue, slot.expires_ms, message_id))
            self._swift.each(self._delete_index_entry, [name for name in old if name != new])
        elif changed["e"] != doc["e"]:
            # Entries carry the expiry that listings and claims filter on; the content type
            # of a message claimable by its name, written above, is its entry.
            if held:
                self._write_claimed_entry(project, queue, message_id, changed, slot)
            elif not doc.get("i"):
                self._write_due_entry(project, queue, message_id, changed, slot)

    def _bring_pushes_forward(
        self, project: str, queue: str, message_id: str, due: tuple[int, int], now_ms: int
    ) -> int:
        """The message's due time moved from ``due[1]`` to the earlier ``due[0]``: its pushes
        owed in between (owed with the message) that no live lease holds are owed at the new
        time (``Driver.edit_message``); returns it when any were, else 0. One listing of the
        queue's pushes owed in between. A push moved off its lease's end leaves that lease's
        late outcome nothing to record."""
        new_ms, old_ms = due
        suffix = f":{message_id}"
        found = [
            owed
            for owed in self._queue_owed(project, queue, from_ms=new_ms + 1, until_ms=old_ms)
            if owed.push_id.endswith(suffix) and not owed.parked_from
        ]
        moving = [owed for owed in found if not self._held_by_lease(project, queue, owed, now_ms)]

        def bring_forward(owed: Owed) -> None:
            # A rate reservation was for the old time: taken again when leased.
            self._move_owed(
                project, queue, owed, dataclasses.replace(owed, at_ms=new_ms, reserved="")
            )

        self._swift.each(bring_forward, moving)
        return new_ms if moving else 0

    def _held_by_lease(self, project: str, queue: str, owed: Owed, now_ms: int) -> bool:
        """Whether ``owed`` is a push a live lease holds: owed at the end of its latest lease,
        still to come (a retry is owed at another time)."""
        if not owed.leases or owed.at_ms <= now_ms:
            return False
        found = self._swift.get(
            self._container(names.PUSHES),
            self._lease_name(project, queue, owed.push_id, owed.leases),
            newest=True,
        )
        # A lease of an earlier release recorded no end: held, as it may be.
        return found is not None and int(json.loads(found[1]).get("e", owed.at_ms)) == owed.at_ms
