"""Claim slots on a Swift whose object servers let a request miss an object being replaced
(``MemorySwift.replacement_windows``): a renewal, a release or a void overwrites a message's
slot, and a claimer whose index entry is stale creates that very slot at the moment."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers.memory_swift import MemorySwift, Process, memory_client
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import ClaimTimes, NewMessage, NewSubscription
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.driver import SwiftDriver
from zaqar_delay.storage.swift.due_order import DueCursor
from zaqar_delay.storage.swift.slots import Slot

P, Q = "p", "q"
CLIENT = "c" * 32


class ReplacingSwift(MemorySwift):
    """Swift in memory that runs ``then`` right after the first blind overwrite of an object
    whose name ends with ``suffix``: its first request is the one the replacement hides the
    object from."""

    def __init__(self) -> None:
        super().__init__()
        self.replacement_windows = True
        self._after: tuple[str, Callable[[], Any]] | None = None
        self.outcomes: list[Any] = []

    def after_overwrite(self, suffix: str, then: Callable[[], Any]) -> None:
        self._after = (suffix, then)

    def request(self, process: Process, method: str, *args: Any, **kwargs: Any) -> Any:
        answer = super().request(process, method, *args, **kwargs)
        after = self._after
        headers = kwargs.get("headers") or {}
        if (
            after is not None
            and method == "put_object"
            and str(args[1]).endswith(after[0])
            and "If-None-Match" not in headers
        ):
            self._after = None
            self.outcomes.append(after[1]())
        return answer


@pytest.mark.parametrize("update", ["renewal", "release"])
def test_a_claimer_with_a_stale_entry_takes_no_slot_being_updated(update: str) -> None:
    """Consumer A claims the message; claimer B still lists the due entry A's claim made
    stale and creates the message's slot 1 just as A's renewal (or release) overwrites it.
    Swift's check misses the slot then: before, B's creation stored over it and B took the
    message while A's renewed claim held it, so two live claims had it (after a release, the
    due entry the release wrote named slot 2 as next while B's claim held slot 1)."""
    swift, clock = ReplacingSwift(), FakeClock()
    namespace = f"zd{uuid.uuid4().hex[:12]}"
    a, b = (SwiftDriver(memory_client(swift, Process(n)), namespace=namespace) for n in "ab")
    a.prepare()
    [message_id] = a.post_messages(P, Q, [NewMessage('"job"', 3600, 0)], CLIENT, clock.now_ms()).ids
    [stale] = b._due_entries(P, Q, clock.now_ms(), DueCursor(), 10)
    claim = a.claim(P, Q, ClaimTimes(60, 60), 1, clock.now_ms()).claim
    assert claim is not None and [m.id for m in claim.messages] == [message_id]
    clock.advance(ms=10_000)  # past the taker grace B gives a slot it finds taken
    b_claim = Slot(claim_id="b" * 24, expires_ms=clock.now_ms() + 60_000)
    swift.after_overwrite(
        f"{message_id}/{names.number_part(1)}",
        lambda: b._try_take(P, Q, stale, b_claim, clock.now_ms()),
    )
    if update == "renewal":
        a.renew_claim(P, Q, claim.id, 120, 60, clock.now_ms())
    else:
        a.release_claim(P, Q, claim.id, clock.now_ms())

    assert len(swift.outcomes) == 1, "B did not meet the slot as it was overwritten"
    [taken] = swift.outcomes
    slot_1 = a._read_slot(P, Q, message_id, 1)
    assert slot_1 is not None and slot_1.claim_id == claim.id, "B stored over A's slot"
    if update == "renewal":
        assert taken is None, "B took the message A's renewed claim holds"
        [held] = a.get_claim(P, Q, claim.id, clock.now_ms()).messages
        assert held.id == message_id
    else:  # released: B may take it, through the next slot
        assert taken is None or taken.slot.n == 2, taken


@pytest.mark.parametrize("made_by", ["a subscription", "a PUT of the queue"])
def test_a_queue_s_metadata_outlives_a_creation_of_the_queue_as_it_is_written(
    made_by: str,
) -> None:
    """A subscription makes its queue unless it exists, as a PUT of the queue does: made just
    as the queue's metadata is written, Swift's check misses the queue object. Before, the
    creation stored its empty metadata over the queue's (its default delay, its limits and
    dead-letter queue were lost), and the PUT answered that it had created the queue."""
    swift, clock = ReplacingSwift(), FakeClock()
    namespace = f"zd{uuid.uuid4().hex[:12]}"
    a, b = (SwiftDriver(memory_client(swift, Process(n)), namespace=namespace) for n in "ab")
    a.prepare()
    assert a.create_queue(P, Q, {"_default_message_delay": 30}, clock.now_ms())
    if made_by == "a subscription":
        subscription = NewSubscription("http://127.0.0.1:9/x", 3600, {}, "s")
        swift.after_overwrite(
            names.queue_object(P, Q),
            lambda: b.create_subscription(P, Q, subscription, clock.now_ms()),
        )
    else:
        swift.after_overwrite(
            names.queue_object(P, Q), lambda: b.create_queue(P, Q, {}, clock.now_ms())
        )
    a.set_metadata(P, Q, {"_default_message_delay": 60})

    assert len(swift.outcomes) == 1, "the creation did not meet the queue as it was written"
    assert a.get_metadata(P, Q) == {"_default_message_delay": 60}
    if made_by == "a PUT of the queue":
        assert swift.outcomes == [False], "the PUT created a queue that existed"


def test_a_dead_letter_copy_stored_again_leaves_its_changed_copy() -> None:
    """A dead-letter move sent again after a failure stores each copy only if it is not
    stored yet: made just as a release rewrites the copy the first attempt stored, Swift's
    check misses it. Before, the copy as first written was stored over it (an edit or a
    retry backoff made since was lost)."""
    swift, clock = ReplacingSwift(), FakeClock()
    namespace = f"zd{uuid.uuid4().hex[:12]}"
    a, b = (SwiftDriver(memory_client(swift, Process(n)), namespace=namespace) for n in "ab")
    a.prepare()
    [message_id] = a.post_messages(P, Q, [NewMessage('"job"', 3600, 0)], CLIENT, clock.now_ms()).ids
    first = a._read_message(P, Q, message_id)
    assert first is not None
    changed = {**first, "d": first["d"] + 30_000}
    swift.after_overwrite(
        a._message_name(P, Q, message_id),
        lambda: b._create_message(P, Q, message_id, first),
    )
    a._write_message(P, Q, message_id, changed)

    assert swift.outcomes == [False], "the copy was stored again"
    stored = a._read_message(P, Q, message_id)
    assert stored is not None and stored["d"] == changed["d"]


def test_a_creation_read_first_stores_nothing_over_an_object_being_replaced() -> None:
    """``SwiftClient.create(read_first=True)``: a create-only write sent while a blind overwrite
    replaces the object passes Swift's check and stores over it; read first, the read is the
    request that misses the object, and the creation that follows finds it."""
    swift = MemorySwift()
    swift.replacement_windows = True
    client = memory_client(swift, Process("a"))
    client.put_container("c")
    client.put("c", "o", b"first", "x/y")

    client.put("c", "o", b"updated", "x/y")
    assert client.create("c", "o", b"created", "x/y") is True, "no creation met the overwrite"
    assert client.get("c", "o", known=True) == ({"content-type": "x/y"}, b"created")

    client.put("c", "o", b"updated again", "x/y")
    assert client.create("c", "o", b"created again", "x/y", read_first=True) is False
    found = client.get("c", "o", known=True)
    assert found is not None and found[1] == b"updated again"
