"""A subscription of a WebSocket session that is gone ends at the first push that finds it
gone, on every store: the session's relay answers 410 for a session that ended, and the
connection is refused when the server process that held the session is gone. Such a push
is not dead-lettered; the message stays for the queue's other subscribers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.receiver import receiver
from tests.helpers.api import Api
from tests.helpers.push import dispatching, subscribe
from zaqar_delay.api.websocket.relay import (
    SESSION_SUBSCRIBER_ENV,
    SessionRelay,
    SessionSubscriber,
)


@pytest.fixture
def relay(api: Api) -> Iterator[SessionRelay]:
    # On the service's clock: the relay takes pushes signed within a window of its now.
    found = SessionRelay("127.0.0.1", max_body=1_000_000, clock=api.service.clock)
    yield found
    found.close()


def subscribe_session(api: Api, relay: SessionRelay, taken: list[bytes]) -> str:
    """A session's own subscription to the queue ``q``, as a session's frame makes it; the
    session takes what it is pushed into ``taken`` while it is open (``taken`` not closed)."""

    def deliver(body: bytes) -> bool:
        if taken and taken[-1] == b"closed":
            return False
        taken.append(body)
        return True

    key = "session-key"
    made = SessionSubscriber(relay.subscriber("a" * 32, deliver, key), key)
    created = api.post(
        "/v2/queues/q/subscriptions",
        json={"ttl": 600},
        extras={SESSION_SUBSCRIBER_ENV: made},
    )
    assert created.status_code == 201, created.text
    return str(created.json["subscription_id"])


def subscribers(api: Api, queue: str = "q") -> list[str]:
    listed = api.get(f"/v2/queues/{queue}/subscriptions").json["subscriptions"]
    return sorted(s["subscriber"] for s in listed)


@pytest.mark.parametrize("how", ["session ended", "process gone"])
def test_a_push_that_finds_its_session_gone_ends_its_subscription(
    api: Api, relay: SessionRelay, how: str
) -> None:
    assert api.put("/v2/queues/q", json={"_dead_letter_queue": "dead"}).status_code == 201
    taken: list[bytes] = []
    subscribe_session(api, relay, taken)
    with receiver() as hook, dispatching(api) as dispatcher:
        subscribe(api, hook)
        [first] = api.post_messages("q", {"body": 1})
        assert dispatcher.run_once() == 2
        assert len(taken) == 1 and len(hook.wait_for(1)) == 1
        if how == "session ended":
            taken.append(b"closed")
        else:
            relay.close()
        assert len(subscribers(api)) == 2
        [second] = api.post_messages("q", {"body": 2})
        [third] = api.post_messages("q", {"body": 3})
        assert dispatcher.run_once() == 4
        # The session took nothing more, and its subscription is gone; the webhook's stays.
        assert len(taken) == 1 + (how == "session ended")
        assert subscribers(api) == [hook.url]
        assert len(hook.wait_for(3)) == 3
        # No dead letter, and the messages stay.
        assert api.get("/v2/queues/dead/stats").json["messages"]["total"] == 0
        ids = ",".join((first, second, third))
        assert len(api.get(f"/v2/queues/q/messages?ids={ids}").json["messages"]) == 3
        last = api.get("/v2/queues/q/messages", query_string="echo=true").json["messages"]
        assert len(last) == 3
