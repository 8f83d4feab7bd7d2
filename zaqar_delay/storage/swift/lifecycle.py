"""A message's life cycle on Swift, declared: the states its index entries and claim slots put
it in, and the transitions between them, each made by one function of the driver.

Swift has no transaction, so each transition is a sequence of writes, and a process may stop
after any of them. The order of the writes is chosen so that every prefix leaves the message
in some state of the table (never in no index: then no claimer would find it again), and
``finish`` says who completes a transition that stopped. ``state_of`` reads the state from
what is stored; the model test (``tests/storage/test_swift_model.py``) checks after every step,
crashes included, that each message is in a state of the table and moved along its edges.
The design document reproduces the table (``doc/source/design.rst``, "Swift: a message's
life cycle").
"""

from __future__ import annotations

import dataclasses
import enum

from zaqar_delay.storage.swift.slots import Slot


class State(enum.Enum):
    """Where a stored message is, as claimers find it."""

    # Its content type carries i=1: its name, which begins with its due time, is its entry.
    NAMED = "named"
    # A due entry d/<due>/<id> names its latest slot; claimers create the next one.
    DUE = "due"
    # A claimer created its next slot for a live claim, and has yet to index it as claimed
    # (its due entry or name still leads other claimers to it, who find the slot taken).
    TAKEN = "taken"
    # A claimed entry c/<claim end>/<id>, and its latest slot's claim is live.
    CLAIMED = "claimed"
    # A claimed entry whose slot's claim ended (released, lapsed, or ended by an edit):
    # claimers give it back as due once the entry's time has passed.
    ENDED = "ended"
    # The message is deleted; what indexed it goes after it, and leads to nothing.
    GONE = "gone"


@dataclasses.dataclass(frozen=True)
class Transition:
    """One row of the table: ``name`` takes a message from one of ``sources`` to one of
    ``targets`` by ``writes`` (in that order), made by the driver's function ``step`` (""
    for the clock); ``finish`` says what a stop after any of those writes leaves, and who
    completes it."""

    name: str
    sources: tuple[State, ...]
    targets: tuple[State, ...]
    step: str
    writes: str
    finish: str


S = State
TRANSITIONS: tuple[Transition, ...] = (
    Transition(
        "post",
        (),
        (S.NAMED,),
        "messages.MessageOps._store",
        "the message with i=1; for several messages, then the post's commit object",
        "a post of several without its commit object is read as missing (never half seen)",
    ),
    Transition(
        "take",
        (S.NAMED, S.DUE),
        (S.TAKEN,),
        "taking.TakeOps._take_through",
        "slot n+1, created only if absent and settled (one creator wins)",
        "the slot's claim holds the message unindexed as claimed; after TAKER_GRACE_MS "
        "claimers meeting its entry repair the index (_repair_index)",
    ),
    Transition(
        "void",
        (S.TAKEN,),
        (S.NAMED, S.DUE),
        "taking.TakeOps._take_through",
        "slot n+1 without a claim; if its due time moved, the entry of its current due time, "
        "then the stale entry deleted",
        "as after take, and the void slot lets the next claimer take n+2",
    ),
    Transition(
        "hold",
        (S.TAKEN,),
        (S.CLAIMED,),
        "claims.ClaimOps._hold",
        "the claimed entry (and the message, if the claim outlives it); then the due entry "
        "deleted, or i removed",
        "the stale due entry or name leads claimers to a taken slot: they leave it",
    ),
    Transition(
        "renew",
        (S.CLAIMED,),
        (S.CLAIMED,),
        "claims.ClaimOps.renew_claim",
        "the slot with the new end, the new claimed entry; then the old one deleted",
        "the old entry, once its time passes, is moved to the slot's new end (lapse)",
    ),
    Transition(
        "claim ends",
        (S.CLAIMED, S.TAKEN),
        (S.ENDED, S.NAMED, S.DUE),
        "",
        "none: the clock passes the slot's end (a TAKEN message's taker died before indexing)",
        "nothing to finish",
    ),
    Transition(
        "release",
        (S.CLAIMED,),
        (S.DUE,),
        "claims.ClaimOps.release_claim",
        "the slot ended; the message, if a retry backoff moves its due time; the due entry; "
        "then the claimed entry deleted",
        "ENDED until the claimed entry's time, then lapse gives it back",
    ),
    Transition(
        "lapse",
        (S.ENDED,),
        (S.DUE,),
        "claims.ClaimOps._return_lapsed_claims",
        "the message, if a retry backoff moves its due time; the due entry; then the "
        "claimed entry deleted",
        "the next claim lists the claimed entry again",
    ),
    Transition(
        "reschedule",
        (S.NAMED, S.DUE, S.CLAIMED),
        (S.DUE,),
        "edits.EditOps.edit_message",
        "slot n+1 void (or the claim's slot ended); for a NAMED message a due entry at its "
        "old time; the message with its new due time; the due entry of that time; then the "
        "old entries deleted (an unclaimed message given the due time it has: none of these, "
        "it stays as it is)",
        "the old entry leads claimers to the void slot: after TAKER_GRACE_MS they repair the "
        "index at the message's new due time",
    ),
    Transition(
        "repair",
        (S.TAKEN,),
        (S.CLAIMED,),
        "taking.TakeOps._repair_index",
        "its taker died before indexing it: the claimed entry of the live claim; then the "
        "stale entry deleted or i removed (a stale entry of a slot no claim holds is "
        "rewritten as due with the latest slot's number)",
        "the stale entry is met and repaired again",
    ),
    Transition(
        "delete",
        (S.NAMED, S.DUE, S.TAKEN, S.CLAIMED, S.ENDED),
        (S.GONE,),
        "slot_ops.SlotOps._remove_message",
        "the message; then its entries and slots",
        "entries without a message are removed by claimers that meet them (orphaned_after_ms)",
    ),
)


def state_of(
    *, exists: bool, named: bool, due_entry: bool, claimed_entry: bool, latest: Slot, now_ms: int
) -> State | None:
    """The state of a message from what is stored: whether the message ``exists``, is
    ``named`` (i=1), has a due entry, a claimed entry, and its ``latest`` slot. None: in no
    index, so no claimer would ever find it (never, if every transition is written in its
    order)."""
    if not exists:
        return S.GONE
    live = latest.live(now_ms)
    if claimed_entry:
        return S.CLAIMED if live else S.ENDED
    if not (named or due_entry):
        return None
    if live:
        return S.TAKEN
    return S.NAMED if named else S.DUE


def reachable(source: State) -> set[State]:
    """The states a message in ``source`` can reach through the table (itself included)."""
    found, frontier = {source}, [source]
    while frontier:
        state = frontier.pop()
        for transition in TRANSITIONS:
            if state in transition.sources:
                new = set(transition.targets) - found
                found |= new
                frontier += new
    return found
