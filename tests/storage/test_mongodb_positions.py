"""MongoDB posting positions held by messages the queue's counter no longer knows of: those a
post stored while its queue was being deleted. Writes that meet them are placed past them,
neither refused nor mistaken for an earlier attempt."""

from __future__ import annotations

import dataclasses
import json

import pytest

from zaqar_delay.clock import FakeClock
from zaqar_delay.models import ClaimTimes, NewMessage, OverLimit
from zaqar_delay.storage.mongodb.driver import MongoDriver

P, Q, DLQ = "p", "q", "dlq"
ALICE = "a" * 32


def messages(*bodies: str) -> list[NewMessage]:
    return [NewMessage(json.dumps(body), 3600, 0) for body in bodies]


def positions(mongo: MongoDriver, queue: str) -> dict[str, int]:
    """Each stored message's body and position in ``queue``."""
    found = mongo._messages.find({"p": P, "q": queue, "e": {"$gt": 0}}, {"b": 1, "k": 1})
    return {json.loads(d["b"]): int(d["k"]) for d in found}


def deleted_while_a_post_stores(
    mongo: MongoDriver, monkeypatch: pytest.MonkeyPatch, queue: str, *late: str
) -> None:
    """Delete ``queue`` while a post of ``late`` stores its messages: they land after the
    deletion removed the queue's messages and before it removed the queue's document."""
    now = FakeClock().now_ms()
    mongo.post_messages(P, queue, messages("early 1", "early 2"), ALICE, now)
    delete_claims = mongo._claims.delete_many
    posted = []

    def post_meanwhile(*args: object, **kwargs: object) -> object:
        if not posted:
            posted.append(mongo.post_messages(P, queue, messages(*late), ALICE, now))
        return delete_claims(*args, **kwargs)  # type: ignore[arg-type]

    with monkeypatch.context() as patched:
        patched.setattr(mongo._claims, "delete_many", post_meanwhile)
        mongo.delete_queue(P, queue)
    # The fault: the queue is gone, its counter with it, and the late post's messages stay.
    assert posted, "no post landed during the deletion"
    assert mongo._queues.count_documents({"p": P, "q": queue}) == 0
    assert positions(mongo, queue) == {body: 3 + i for i, body in enumerate(late)}


def test_a_post_to_a_queue_made_again_after_a_deletion_kept_a_post_is_stored(
    mongo: MongoDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queue made again counts from 1, and its posting positions reach the late post's
    (3 and 4). Before, every post meeting them answered 503 (and said, wrongly, that a repeat
    had taken a dedup id over) until the counter passed them."""
    deleted_while_a_post_stores(mongo, monkeypatch, Q, "late 1", "late 2")
    clock = FakeClock()

    posted = mongo.post_messages(P, Q, messages(*"abcde"), ALICE, clock.now_ms())

    assert [m.body for m in mongo.get_messages(P, Q, posted.ids, clock.now_ms())] == [*"abcde"]
    placed = positions(mongo, Q)
    assert set(placed) == {"late 1", "late 2", *"abcde"}
    assert placed["a"] == 1 and placed["b"] == 2, "moved although its position was free"
    assert min(placed[body] for body in "cde") > placed["late 2"]
    # The counter is past them all: the next post meets no held position.
    after = mongo.post_messages(P, Q, messages("f"), ALICE, clock.now_ms())
    assert positions(mongo, Q)["f"] == max(placed.values()) + 1
    assert mongo.stats(P, Q, clock.now_ms()).total == 8
    assert [m.id for m in mongo.get_messages(P, Q, after.ids, clock.now_ms())] == after.ids


def test_dead_letters_copied_to_a_queue_whose_positions_are_held_are_stored(
    mongo: MongoDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Copies from another store, placed where the dead-letter queue's counter starts again.
    Before, a copy refused for its position was taken for one an earlier attempt had stored:
    the service then deleted the original, and the message was lost."""
    deleted_while_a_post_stores(mongo, monkeypatch, DLQ, "late 1", "late 2")
    clock = FakeClock()
    posted = mongo.post_messages(P, Q, messages(*"abcd"), ALICE, clock.now_ms())
    # As if from another store: in this one, dead letters move by an update, not a copy.
    dead = tuple(
        dataclasses.replace(m, id=f"{m.id}-elsewhere")
        for m in mongo.get_messages(P, Q, posted.ids, clock.now_ms())
    )

    mongo.receive_dead_letters(P, OverLimit(DLQ, None, dead), clock.now_ms())

    copied = mongo.get_messages(P, DLQ, [m.id for m in dead], clock.now_ms())
    assert [m.body for m in copied] == [*"abcd"]
    assert mongo.stats(P, DLQ, clock.now_ms()).total == 6
    # An attempt repeated stores nothing twice.
    mongo.receive_dead_letters(P, OverLimit(DLQ, None, dead), clock.now_ms())
    assert mongo.stats(P, DLQ, clock.now_ms()).total == 6


def test_dead_letters_moved_to_a_queue_whose_positions_are_held_are_moved(
    mongo: MongoDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the move's bulk update failed on the held positions and the claim answered
    an error each time it found the messages over their claim count."""
    deleted_while_a_post_stores(mongo, monkeypatch, DLQ, "late 1", "late 2")
    clock = FakeClock()
    mongo.create_queue(P, Q, {"_max_claim_count": 1, "_dead_letter_queue": DLQ}, clock.now_ms())
    posted = mongo.post_messages(P, Q, messages(*"abcd"), ALICE, clock.now_ms())
    held = mongo.create_claim(P, Q, ClaimTimes(60, 60), 10, clock.now_ms())
    assert held is not None and len(held.messages) == 4
    mongo.release_claim(P, Q, held.id, clock.now_ms())
    outcome = mongo.claim(P, Q, ClaimTimes(60, 60), 10, clock.now_ms())
    assert outcome.over_limit is not None and len(outcome.over_limit.messages) == 4

    mongo.move_dead_letters(P, Q, outcome.over_limit, clock.now_ms())

    moved = mongo.get_messages(P, DLQ, posted.ids, clock.now_ms())
    assert [m.body for m in moved] == [*"abcd"]
    assert mongo.stats(P, Q, clock.now_ms()).total == 0
    assert set(positions(mongo, DLQ)) == {"late 1", "late 2", *"abcd"}
