"""A message keeps the hops it was posted with (``NewMessage.hops``: the pushes of the service
it came through, ``zaqar_delay.push_hops``) whatever is done to it, on every store: read,
leased for a push, claimed, renewed, released, edited, moved to its dead-letter queue and
popped. Messages posted without hops read 0, and keep the records they had."""

from __future__ import annotations

import pytest

from tests.helpers.pooled import CONTRACT_STORES
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import (
    ClaimTimes,
    LeaseRequest,
    ListQuery,
    MessageEdit,
    NewMessage,
    NewSubscription,
)
from zaqar_delay.storage.base import Driver

pytestmark = pytest.mark.parametrize("store_uri", [*CONTRACT_STORES, "swift"], indirect=True)

P, Q, DLQ = "project-a", "jobs", "dead"
ALICE = "a" * 32


def hops_by_body(messages: object) -> dict[str, int]:
    return {m.body: m.hops for m in messages}  # type: ignore[attr-defined]


def test_hops_survive_reads_claims_edits_moves_pushes_and_pops(
    driver: Driver, clock: FakeClock
) -> None:
    metadata = {"_max_claim_count": 1, "_dead_letter_queue": DLQ}
    driver.create_queue(P, Q, metadata, clock.now_ms())
    driver.create_subscription(
        P, Q, NewSubscription("http://127.0.0.1:9/h", 3600, {}, "s"), clock.now_ms()
    )
    posted = [NewMessage('"far"', 3600, 0, hops=255), NewMessage('"near"', 3600, 0, hops=1)]
    far, near = driver.post_messages(P, Q, posted, ALICE, clock.now_ms()).ids
    [plain] = driver.post_messages(
        P, Q, [NewMessage('"plain"', 3600, 0)], ALICE, clock.now_ms()
    ).ids
    now = clock.now_ms()
    expected = {"far": 255, "near": 1, "plain": 0}
    assert hops_by_body(driver.get_messages(P, Q, [far, near, plain], now)) == expected
    listing = ListQuery(marker=None, limit=10, client_id=ALICE, echo=True)
    assert hops_by_body(driver.list_messages(P, Q, listing, now).messages) == expected
    leased = driver.lease_pushes(P, Q, LeaseRequest(now, 30_000, 10))
    assert hops_by_body(d.message for d in leased) == expected

    held = driver.create_claim(P, Q, ClaimTimes(300, 60), 10, now)
    assert held is not None and hops_by_body(held.messages) == expected
    driver.renew_claim(P, Q, held.id, 600, 60, now)
    assert hops_by_body(driver.get_claim(P, Q, held.id, now).messages) == expected
    driver.edit_message(P, Q, MessageEdit(near, held.id, body_json='"nearer"'), now)
    driver.release_claim(P, Q, held.id, now)
    [edited] = driver.get_messages(P, Q, [near], now)
    assert (edited.body, edited.hops) == ("nearer", 1)

    # Claimed once already: the next claim finds them over _max_claim_count, and the move
    # to the dead-letter queue is no push, so the copies keep their hops.
    outcome = driver.claim(P, Q, ClaimTimes(300, 60), 10, clock.now_ms())
    assert outcome.over_limit is not None
    assert hops_by_body(outcome.over_limit.messages) == {"far": 255, "nearer": 1, "plain": 0}
    driver.move_dead_letters(P, Q, outcome.over_limit, clock.now_ms())
    moved = driver.get_messages(P, DLQ, [far, near, plain], clock.now_ms())
    assert hops_by_body(moved) == {"far": 255, "nearer": 1, "plain": 0}
    popped = driver.pop_messages(P, DLQ, 10, clock.now_ms())
    assert hops_by_body(popped) == {"far": 255, "nearer": 1, "plain": 0}
