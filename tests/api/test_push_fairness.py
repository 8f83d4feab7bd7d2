"""Projects are served fairly by the push dispatcher: one project's backlog, held by a receiver
that does not answer, leaves another project's push the first slot that frees, instead of
taking every slot in turn (``push/dispatcher.py``)."""

from __future__ import annotations

from testbed.receiver import receiver
from tests.helpers.api import Api
from tests.helpers.push import senders
from zaqar_delay.push.dispatcher import Dispatcher

BACKLOG = {"X-Project-ID": "backlog"}
PUNCTUAL = {"X-Project-ID": "punctual"}


def test_a_backlog_held_by_its_receiver_leaves_another_projects_push_a_slot(api: Api) -> None:
    with receiver(hold=True) as held, receiver() as answering:
        subscribed = api.post(
            "/v2/queues/q/subscriptions", json={"subscriber": held.url}, headers=BACKLOG
        )
        assert subscribed.status_code == 201, subscribed.text
        api.post_messages("q", *[{"body": n} for n in range(10)], headers=BACKLOG)
        api.clock.advance(ms=5)  # the other project's push is owed after the whole backlog
        api.post("/v2/queues/q/subscriptions", json={"subscriber": answering.url}, headers=PUNCTUAL)
        api.post_messages("q", {"body": "on time"}, headers=PUNCTUAL)
        dispatcher = Dispatcher(api.service, senders(), concurrency=2)
        dispatcher.start()
        try:
            # The fault: the backlog's receiver holds the requests it was sent.
            held.wait_for(1)
            [push] = answering.wait_for(1, timeout_s=10)
            assert push.json()["body"] == "on time"
            with held.lock:
                assert held.in_flight >= 1 and len(held.received) < 10
        finally:
            held.answering.set()
            dispatcher.stop()
