"""The dispatcher on a store slow to answer, on the fake clock and a real store: a push whose
lease the store's answer ate is not sent (another dispatcher may lease it meanwhile), and the
next lease is longer; outcomes are settled while a lease round still waits on the store."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.receiver import receiver
from tests.helpers.api import Api
from tests.helpers.push import senders, subscribe
from zaqar_delay.models import Delivery
from zaqar_delay.push.dispatcher import Dispatcher


@pytest.fixture
def dispatcher(api: Api) -> Iterator[Dispatcher]:
    dispatcher = Dispatcher(api.service, senders(), concurrency=4)
    yield dispatcher
    dispatcher.stop()


def test_a_push_leased_too_slowly_is_not_sent_and_is_leased_for_longer_next(
    api: Api, dispatcher: Dispatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    door = api.service.pushes
    lease_pushes = door.lease_pushes
    base_ms = dispatcher.lease_length.base_ms
    asked: list[tuple[int, int]] = []  # (lease asked for, pushes leased)

    def slow_lease(*args: Any) -> list[Delivery]:
        leased = lease_pushes(*args)
        asked.append((args[3], len(leased)))
        api.clock.advance(ms=base_ms)  # the store answers a whole base lease later
        return leased

    monkeypatch.setattr(door, "lease_pushes", slow_lease)
    with receiver() as hook:
        subscribe(api, hook)
        api.post_messages("q", {"body": 1, "ttl": 600})
        assert dispatcher.run_once() == 0
        # The store did lease it, for the base lease, and answered as that lease ended.
        assert asked == [(base_ms, 1)]
        assert hook.received == []
        api.clock.advance(ms=1)  # the lease has ended: the push is owed again
        assert dispatcher.run_once() == 1
        # Leased for three base leases (the slowest call twice over): two are left to use.
        assert asked[1] == (3 * base_ms, 1)
        [push] = hook.wait_for(1)
        assert push.json()["body"] == 1
        assert dispatcher.run_once() == 0  # settled: never sent again


def test_a_push_leased_too_slowly_is_given_back_at_once(
    api: Api, dispatcher: Dispatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Owed again as soon as it is settled unsent, not when its lease ends."""
    door = api.service.pushes
    lease_pushes = door.lease_pushes
    timeout_ms = dispatcher.lease_length.push_timeout_ms
    slow = [True]

    def slow_once(*args: Any) -> list[Delivery]:
        leased = lease_pushes(*args)
        if leased and slow[0]:
            slow[0] = False
            api.clock.advance(ms=timeout_ms * 3 // 2)  # 1.5 push timeouts of the lease left
        return leased

    monkeypatch.setattr(door, "lease_pushes", slow_once)
    with receiver() as hook:
        subscribe(api, hook)
        api.post_messages("q", {"body": 1, "ttl": 600})
        assert dispatcher.run_once() == 0
        assert not slow[0] and hook.received == []
        assert dispatcher.run_once() == 1  # the clock has not moved: the lease would hold it
        [push] = hook.wait_for(1)
        assert push.json()["body"] == 1 and push.headers["X-Zaqar-Delay-Attempt"] == "1"


def test_outcomes_are_settled_while_a_lease_round_waits_on_the_store(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    door = api.service.pushes
    due_push_queues, settle_pushes = door.due_push_queues, door.settle_pushes
    rounds = 0
    round_waits, released, settled = threading.Event(), threading.Event(), threading.Event()

    def stuck_round(*args: Any) -> Any:
        nonlocal rounds
        rounds += 1
        if rounds > 1:  # the round after the one that sent the push hangs on the store
            round_waits.set()
            released.wait(30)
        return due_push_queues(*args)

    def settle(*args: Any) -> Any:
        answer = settle_pushes(*args)
        settled.set()
        return answer

    monkeypatch.setattr(door, "due_push_queues", stuck_round)
    monkeypatch.setattr(door, "settle_pushes", settle)
    dispatcher = Dispatcher(api.service, senders(), concurrency=4, recheck_s=0.02)
    with receiver(hold=True) as hook:
        subscribe(api, hook)
        api.post_messages("q", {"body": 1, "ttl": 600})
        dispatcher.start()
        try:
            hook.wait_for(1)
            assert round_waits.wait(10), "no lease round waited on the store"
            hook.answering.set()  # the request ends while that round still waits
            assert settled.wait(10), "the outcome waited for the lease round"
            assert not released.is_set()
        finally:
            released.set()
            dispatcher.stop()
