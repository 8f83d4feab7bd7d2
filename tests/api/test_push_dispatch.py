"""The push dispatcher against a real store and a real HTTP receiver, on the fake clock:
pushes at the due time and never before, Zaqar's retry schedule, permanent failures and
dead-lettering, signatures and stable delivery ids."""

from __future__ import annotations

import email
import email.policy
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiosmtpd.smtp import Envelope

from testbed.receiver import receiver
from tests.helpers.api import PROJECT, Api, api_on, confirmation_headers
from tests.helpers.push import senders, subscribe
from zaqar_delay.api import views
from zaqar_delay.api.websocket.relay import (
    SESSION_SUBSCRIBER_ENV,
    SessionRelay,
    SessionSubscriber,
)
from zaqar_delay.conf import JournalSettings, NotificationSettings, SignedUrlSettings, load_settings
from zaqar_delay.models import LeaseRequest
from zaqar_delay.push.dispatcher import Dispatcher
from zaqar_delay.push.guard import AddressGuard


@pytest.fixture
def dispatcher(api: Api) -> Iterator[Dispatcher]:
    sender = senders()
    dispatcher = Dispatcher(api.service, sender, concurrency=4)
    yield dispatcher
    dispatcher.stop()


def test_pushed_when_due_never_before(api: Api, dispatcher: Dispatcher) -> None:
    with receiver() as hook:
        sid = subscribe(api, hook)
        due_ms = api.clock.now_ms() + 30_000
        [mid] = api.post_messages("q", {"body": {"n": 1}, "deliver_at": due_ms, "ttl": 600})
        api.clock.advance(ms=29_999)
        assert dispatcher.run_once() == 0
        assert hook.received == []
        api.clock.advance(ms=1)
        assert dispatcher.run_once() == 1
        [push] = hook.wait_for(1)
        document = push.json()
        assert document == {
            "id": mid,
            "href": f"/v2/queues/q/messages/{mid}",
            "ttl": 600,
            "age": 30,
            "body": {"n": 1},
            "queue_name": "q",
            "Message_Type": "Notification",
        }
        assert push.headers["X-Zaqar-Delay-Delivery-Id"] == f"{sid}:{mid}"
        assert push.headers["X-Zaqar-Delay-Attempt"] == "1"
        assert dispatcher.run_once() == 0  # delivered once
        # Pushing does not consume: pull consumers still see it.
        assert api.get(f"/v2/queues/q/messages/{mid}").status_code == 200


def test_a_message_rescheduled_earlier_is_pushed_at_its_new_time(api: Api) -> None:
    """The edit that brings a push forward wakes this process's dispatcher, as a post does:
    it sleeps until the earliest push it knows of, here for longer than the test waits."""
    dispatcher = Dispatcher(api.service, senders(), concurrency=4, recheck_s=600)
    api.service.lifecycle.pushes_owed = dispatcher.notify  # as the server wires it
    with receiver() as hook:
        subscribe(api, hook)
        [mid] = api.post_messages("q", {"body": 1, "deliver_at": api.clock.now_ms() + 600_000})
        dispatcher.start()
        try:
            deadline = time.monotonic() + 10
            while dispatcher._sleeping_until is None:
                assert time.monotonic() < deadline, "the dispatcher never went to sleep"
                time.sleep(0.01)
            assert hook.received == []
            assert api.patch(f"/v2/queues/q/messages/{mid}", json={"delay": 0}).status_code == 204
            [push] = hook.wait_for(1, timeout_s=10)
            assert push.json()["id"] == mid
            assert push.headers["X-Zaqar-Delay-Attempt"] == "1"
        finally:
            dispatcher.stop()


@pytest.fixture
def running(api: Api) -> Iterator[Dispatcher]:
    """A dispatcher running in the background with 4 request slots."""
    dispatcher = Dispatcher(api.service, senders(), concurrency=4, recheck_s=0.02)
    dispatcher.start()
    yield dispatcher
    dispatcher.stop()


def test_a_receiver_that_hangs_holds_only_the_slots_of_its_requests(
    api: Api, running: Dispatcher
) -> None:
    with receiver(hold=True) as hanging, receiver() as answering:
        subscribe(api, hanging, "hangs")
        subscribe(api, answering, "answers")
        api.post_messages("hangs", {"body": 1}, {"body": 2})
        hanging.wait_for(2)
        # Two requests hang; the other queue's push is sent meanwhile, not after them.
        api.post_messages("answers", {"body": 3})
        [push] = answering.wait_for(1)
        assert push.json()["body"] == 3
        assert len(hanging.received) == 2
        hanging.answering.set()


def test_only_requests_in_flight_are_leased(api: Api, running: Dispatcher) -> None:
    """So a crash repeats at most the requests that were in flight."""
    with receiver(hold=True) as hanging:
        subscribe(api, hanging)
        api.post_messages("q", *({"body": n} for n in range(10)))
        hanging.wait_for(4)
        # Four in flight (the slots); the six others are still owed to any dispatcher.
        others = api.store("q").lease_pushes(
            PROJECT, "q", LeaseRequest(api.clock.now_ms(), 60_000, 100)
        )
        assert len(others) == 6
        assert len(hanging.received) == 4
        hanging.answering.set()


def wait_until_leased(api: Api, due_ms: int) -> None:
    """Until a running dispatcher leased queue q's push owed at ``due_ms`` ahead of time."""
    deadline = time.monotonic() + 10
    while api.store("q").next_push_ms() == due_ms:
        assert time.monotonic() < deadline, "never leased ahead"
        time.sleep(0.01)


def test_a_push_leased_ahead_is_sent_at_its_time_never_before(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    push_thread_reads = [0]
    read_clock = api.clock.now_ms

    def counted_now_ms() -> int:
        if threading.current_thread().name.startswith("zaqar-delay-push"):
            push_thread_reads[0] += 1
        return read_clock()

    monkeypatch.setattr(api.clock, "now_ms", counted_now_ms)
    sender = senders()
    dispatcher = Dispatcher(
        api.service, sender, concurrency=4, recheck_s=0.02, lease_ahead_ms=10_000
    )
    dispatcher.start()
    try:
        with receiver() as hook:
            subscribe(api, hook)
            due_ms = api.clock.now_ms() + 5_000
            [mid] = api.post_messages("q", {"body": 1, "deliver_at": due_ms})
            # Within the lease-ahead time: the running dispatcher holds it at once...
            wait_until_leased(api, due_ms)
            assert api.store("q").lease_pushes(PROJECT, "q", LeaseRequest(due_ms, 60_000, 10)) == []
            # ...and sends it when its time comes on the clock, not before: the push thread
            # reads the clock again and again and keeps waiting.
            api.clock.advance(ms=4_999)
            before, deadline = push_thread_reads[0], time.monotonic() + 10
            while push_thread_reads[0] < before + 5:
                assert time.monotonic() < deadline, "the push stopped reading the clock"
                time.sleep(0.01)
            assert hook.received == []
            api.clock.advance(ms=1)
            [push] = hook.wait_for(1)
            assert push.json()["id"] == mid
            assert push.headers["X-Zaqar-Delay-Attempt"] == "1"
    finally:
        dispatcher.stop()


@pytest.mark.parametrize("options", [{}, {"_max_concurrent_dispatches": 1}])
def test_a_stopping_dispatcher_gives_back_the_pushes_it_leased_ahead(
    api: Api, options: dict[str, object]
) -> None:
    """Owed again at their time to the other dispatchers at once, not a lease later, with
    no attempt counted, and their request place free."""
    dispatcher = Dispatcher(api.service, senders(), concurrency=4, lease_ahead_ms=10_000)
    dispatcher.start()
    try:
        with receiver() as hook:
            subscribe(api, hook, **options)
            due_ms = api.clock.now_ms() + 5_000
            [mid] = api.post_messages("q", {"body": 1, "deliver_at": due_ms})
            wait_until_leased(api, due_ms)
            dispatcher.stop()
            assert hook.received == []
    finally:
        dispatcher.stop()
    assert api.store("q").next_push_ms() == due_ms
    now_ms = api.clock.now_ms()
    [again] = api.store("q").lease_pushes(PROJECT, "q", LeaseRequest(now_ms, 60_000, 10, due_ms))
    assert (again.message.id, again.attempts, again.owed_ms) == (mid, 0, due_ms)


def test_dispatch_limits_hold_across_dispatchers(api: Api) -> None:
    """Two dispatchers with free slots, one subscription allowed one request at a time."""
    dispatchers = [
        Dispatcher(api.service, senders(), concurrency=4, recheck_s=0.02) for _ in range(2)
    ]
    for dispatcher in dispatchers:
        dispatcher.start()
    try:
        with receiver(delay_s=0.05) as hook:
            subscribe(api, hook, _max_concurrent_dispatches=1)
            api.post_messages("q", *({"body": n} for n in range(6)))
            pushes = hook.wait_for(6)
            assert sorted(p.json()["body"] for p in pushes) == list(range(6))
            assert hook.most_in_flight == 1
    finally:
        for dispatcher in dispatchers:
            dispatcher.stop()


@pytest.mark.parametrize(
    "options",
    [
        {"_max_dispatches_per_second": 0},
        {"_max_dispatches_per_second": "10"},
        {"_max_dispatches_per_second": True},
        {"_max_concurrent_dispatches": 0},
        {"_max_concurrent_dispatches": 1.5},
        {"_max_concurrent_dispatches": 1001},
    ],
)
def test_dispatch_limits_out_of_range_are_refused(api: Api, options: dict[str, object]) -> None:
    answer = api.post(
        "/v2/queues/q/subscriptions",
        json={"subscriber": "http://127.0.0.1:9/hook", "options": options},
    )
    assert answer.status_code == 400
    assert next(iter(options)) in answer.json["description"]
    assert api.get("/v2/queues/q/subscriptions").json["subscriptions"] == []


def test_the_signature_verifies_with_the_subscription_secret(
    api: Api, dispatcher: Dispatcher
) -> None:
    with receiver() as hook:
        created = api.post("/v2/queues/q/subscriptions", json={"subscriber": hook.url})
        secret = created.json["signing_secret"]
        assert len(secret) >= 32
        api.post_messages("q", {"body": "signed"})
        dispatcher.run_once()
        [push] = hook.wait_for(1)
        fields = dict(
            part.split("=", 1) for part in push.headers["X-Zaqar-Delay-Signature"].split(",")
        )
        delivery_id = push.headers["X-Zaqar-Delay-Delivery-Id"]
        signed = f"{fields['t']}.{delivery_id}.".encode() + push.body
        expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(fields["v2"], expected)


def test_failures_are_retried_on_zaqar_s_schedule(api: Api, dispatcher: Dispatcher) -> None:
    policy = {"retries_with_no_delay": 1, "minimum_delay_retries": 1, "minimum_delay": 5,
              "maximum_delay": 10, "maximum_delay_retries": 1}  # fmt: skip
    with receiver(statuses=[503, 500, 429, 502]) as hook:
        subscribe(api, hook, _retry_policy=policy)
        api.post_messages("q", {"body": "flaky"})
        start = api.clock.now_ms()
        dispatcher.run_once()  # 503
        dispatcher.run_once()  # at once: 500
        assert len(hook.wait_for(2)) == 2
        api.clock.advance(ms=4_999)
        assert dispatcher.run_once() == 0  # never before the retry is due
        api.clock.advance(ms=1)
        dispatcher.run_once()  # after minimum_delay: 429
        api.clock.advance(seconds=5)
        dispatcher.run_once()  # linear 5: 502
        api.clock.advance(seconds=10)
        dispatcher.run_once()  # maximum_delay: 200
        pushes = hook.wait_for(5)
        assert [p.headers["X-Zaqar-Delay-Attempt"] for p in pushes] == ["1", "2", "3", "4", "5"]
        assert len({p.headers["X-Zaqar-Delay-Delivery-Id"] for p in pushes}) == 1
        assert api.clock.now_ms() - start == 20_000
        api.clock.advance(seconds=60)
        assert dispatcher.run_once() == 0


def test_exhausted_retries_and_permanent_failures_go_to_the_dead_letter_queue(
    api: Api, dispatcher: Dispatcher
) -> None:
    policy = {"retries_with_no_delay": 1, "minimum_delay_retries": 0, "minimum_delay": 5,
              "maximum_delay": 5, "maximum_delay_retries": 0}  # fmt: skip
    assert api.put("/v2/queues/q", json={"_dead_letter_queue": "dead"}).status_code == 201
    with receiver(statuses=[500, 500, 404]) as hook:
        sid = subscribe(api, hook, _retry_policy=policy)
        [exhausted] = api.post_messages("q", {"body": "a"})
        dispatcher.run_once()
        dispatcher.run_once()  # the one retry: given up
        [permanent] = api.post_messages("q", {"body": "b"})
        dispatcher.run_once()  # 404: no retry
        assert len(hook.wait_for(3)) == 3
        dead = api.get("/v2/queues/dead/messages?echo=true").json["messages"]
        by_id = {d["body"]["message"]["id"]: d["body"] for d in dead}
        assert set(by_id) == {exhausted, permanent}
        assert by_id[exhausted]["attempts"] == 2 and by_id[exhausted]["last_error"] == "HTTP 500"
        assert by_id[permanent]["attempts"] == 1 and by_id[permanent]["last_error"] == "HTTP 404"
        assert by_id[permanent]["subscription_id"] == sid
        api.clock.advance(seconds=60)
        assert dispatcher.run_once() == 0


def test_post_data_template_and_headers(api: Api, dispatcher: Dispatcher) -> None:
    with receiver() as hook:
        subscribe(
            api,
            hook,
            post_data='{"event": "due", "message": "$zaqar_message$"}',
            post_headers={"X-Team": "billing"},
        )
        [mid] = api.post_messages("q", {"body": 7, "ttl": 120})
        dispatcher.run_once()
        [push] = hook.wait_for(1)
        # A template embeds Zaqar's own notification: the message as posted, its queue and
        # type, as Zaqar clients expect; the delivery id header still names the message.
        assert push.json() == {
            "event": "due",
            "message": {"body": 7, "ttl": 120, "queue_name": "q", "Message_Type": "Notification"},
        }
        assert push.headers["X-Team"] == "billing"
        assert push.headers["X-Zaqar-Delay-Delivery-Id"].endswith(f":{mid}")


def test_a_denied_address_is_never_connected_to(api: Api) -> None:
    sender = senders(AddressGuard(deny=["127.0.0.0/8"]))
    dispatcher = Dispatcher(api.service, sender, concurrency=1)
    try:
        assert api.put("/v2/queues/q", json={"_dead_letter_queue": "dead"}).status_code == 201
        with receiver() as hook:
            subscribe(api, hook)
            api.post_messages("q", {"body": "x"})
            assert dispatcher.run_once() == 1
            assert hook.received == []
            [dead] = api.get("/v2/queues/dead/messages?echo=true").json["messages"]
            assert "pushes may not reach" in dead["body"]["last_error"]
    finally:
        dispatcher.stop()


@pytest.fixture(params=["embedded", "mongodb"])
def journaling(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Api]:
    """The API with its lifecycle journal in ``tmp_path``."""
    yield from api_on(request, request.param, journal=JournalSettings(path=str(tmp_path)))


def test_every_attempt_is_counted_and_journaled(journaling: Api, tmp_path: Path) -> None:
    api = journaling
    metrics = api.service.metrics
    sender = senders()
    dispatcher = Dispatcher(api.service, sender, concurrency=2)
    policy = {"retries_with_no_delay": 1, "minimum_delay_retries": 0, "minimum_delay": 5,
              "maximum_delay": 5, "maximum_delay_retries": 0}  # fmt: skip
    try:
        assert api.put("/v2/queues/q", json={"_dead_letter_queue": "dead"}).status_code == 201
        with receiver(statuses=[503, 200, 500, 500]) as hook:
            subscribe(api, hook, _retry_policy=policy)
            [ok] = api.post_messages("q", {"body": "ok"})
            api.clock.advance(ms=40)
            dispatcher.run_once()  # 503: retry
            dispatcher.run_once()  # 200
            [lost] = api.post_messages("q", {"body": "lost"})
            dispatcher.run_once()  # 500: retry
            dispatcher.run_once()  # 500: out of retries, dead-lettered
            hook.wait_for(4)
        text = metrics.render().decode()
        for outcome, count in (("delivered", 1), ("retry", 2), ("failed", 1)):
            assert f'zaqar_delay_push_attempts_total{{outcome="{outcome}"}} {count}.0' in text
        assert "zaqar_delay_pushes_dead_lettered_total 1.0" in text
        assert "zaqar_delay_push_lateness_seconds_count 2.0" in text  # first attempts only
        lines = [
            json.loads(line)
            for f in sorted(tmp_path.iterdir())
            for line in f.read_text().splitlines()
        ]
        pushed = [
            (e["message_id"], e["attempt"], e["outcome"]) for e in lines if e["event"] == "pushed"
        ]
        assert pushed == [
            (ok, 1, "retry"),
            (ok, 2, "delivered"),
            (lost, 1, "retry"),
            (lost, 2, "failed"),
        ]
        assert [e["message_id"] for e in lines if e["event"] == "dead_lettered"] == [lost]
        # The dead letter entered its queue as a post: journaled and counted there.
        assert [e["queue"] for e in lines if e["event"] == "posted"] == ["q", "q", "dead"]
        first = next(e for e in lines if e["event"] == "pushed")
        assert first["ts"] - first["due"] == 40 and first["error"] == "HTTP 503"
    finally:
        dispatcher.stop()


@pytest.fixture(params=["embedded", "mongodb"])
def mailing(request: pytest.FixtureRequest) -> Iterator[Api]:
    """The API with one sender besides the default that mail subscriptions may name."""
    yield from api_on(
        request,
        request.param,
        notification=NotificationSettings(smtp_allowed_senders=("q@example.com",)),
    )


def test_mailto_subscribers_get_a_mail_through_the_smtp_server(
    mailing: Api, smtp_inbox: tuple[int, list[Envelope]]
) -> None:
    api = mailing
    port, received = smtp_inbox
    sender = senders(smtp_port=port, allowed_senders=("q@example.com",))
    dispatcher = Dispatcher(api.service, sender)
    try:
        created = api.post(
            "/v2/queues/q/subscriptions",
            json={
                "subscriber": "mailto:ops@example.com?subject=Due",
                "options": {"from": "q@example.com"},
            },
        )
        assert created.status_code == 201, created.text
        secret = created.json["signing_secret"]
        [mid] = api.post_messages("q", {"body": {"job": 3}})
        assert dispatcher.run_once() == 1
        [envelope] = received
        assert envelope.rcpt_tos == ["ops@example.com"]
        mail = email.message_from_bytes(envelope.content, policy=email.policy.default)  # type: ignore[arg-type]
        assert mail["Subject"] == "Due" and mail["From"] == "q@example.com"
        assert mail["X-Zaqar-Delay-Delivery-Id"].endswith(f":{mid}")
        text = mail.get_content()  # type: ignore[attr-defined]
        document = json.loads(text)
        assert document["body"] == {"job": 3} and document["queue_name"] == "q"
        # The signature arrives as sent (not RFC 2047-encoded) and verifies over the text.
        raw_headers = envelope.content.split(b"\r\n\r\n", 1)[0]  # type: ignore[union-attr]
        assert b"=?utf-8?" not in raw_headers
        fields = dict(part.split("=", 1) for part in mail["X-Zaqar-Delay-Signature"].split(","))
        signed = f"{fields['t']}.{mail['X-Zaqar-Delay-Delivery-Id']}.{text.rstrip()}".encode()
        expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(fields["v2"], expected)
        assert dispatcher.run_once() == 0
    finally:
        dispatcher.stop()


def test_without_an_smtp_server_a_mailto_push_fails_for_good(
    api: Api, dispatcher: Dispatcher
) -> None:
    assert api.put("/v2/queues/q", json={"_dead_letter_queue": "dead"}).status_code == 201
    assert (
        api.post(
            "/v2/queues/q/subscriptions", json={"subscriber": "mailto:a@example.com"}
        ).status_code
        == 201
    )
    api.post_messages("q", {"body": 1})
    assert dispatcher.run_once() == 1
    [dead] = api.get("/v2/queues/dead/messages?echo=true").json["messages"]
    assert "no SMTP server" in dead["body"]["last_error"]


def test_delete_after_push_makes_a_push_only_queue(api: Api, dispatcher: Dispatcher) -> None:
    assert api.put("/v2/queues/q", json={"_delete_after_push": True}).status_code == 201
    assert api.put("/v2/queues/p", json={"_delete_after_push": "yes"}).status_code == 400
    with receiver(statuses=[503]) as hook:
        subscribe(api, hook)
        [mid] = api.post_messages("q", {"body": 1})
        dispatcher.run_once()  # failed: kept
        assert api.get(f"/v2/queues/q/messages/{mid}").status_code == 200
        dispatcher.run_once()  # delivered: deleted
        hook.wait_for(2)
        assert api.get(f"/v2/queues/q/messages/{mid}").status_code == 404


@pytest.fixture(params=["embedded", "mongodb"])
def confirming(request: pytest.FixtureRequest) -> Iterator[Api]:
    """The API with Zaqar's require_confirmation on."""
    yield from api_on(
        request,
        request.param,
        notification=NotificationSettings(require_confirmation=True),
        signed_url=SignedUrlSettings(secret_key="s" * 32),
    )


def test_require_confirmation_sends_a_signed_url_and_pushes_only_once_confirmed(
    confirming: Api,
) -> None:
    api = confirming
    dispatcher = Dispatcher(api.service, senders(), require_confirmation=True)
    try:
        with receiver() as hook:
            sid = subscribe(api, hook)
            [request] = hook.wait_for(1)
            document = request.json()
            assert document["Message_Type"] == "SubscriptionConfirmation"
            assert document["Message"] == "You have chosen to subscribe to the queue: q"
            # Strings, as in Zaqar: the header values a subscriber sends back as they are.
            assert document["URL-Paths"] == f"/v2/queues/q/subscriptions/{sid}/confirm"
            assert document["URL-Methods"] == "PUT"
            # Without Keystone's catalog no public URL is known, as in Zaqar.
            assert "WSGISubscribeURL" not in document
            assert (document["SubscribeBody"], document["UnsubscribeBody"]) == (
                {"confirmed": True},
                {"confirmed": False},
            )
            # Unconfirmed: what falls due is dropped, not pushed.
            api.post_messages("q", {"body": "before"})
            assert dispatcher.run_once() == 1
            assert len(hook.received) == 1
            assert api.get(f"/v2/queues/q/subscriptions/{sid}").json["confirmed"] is False
            # The subscriber confirms with the pre-signed URL alone.
            headers = confirmation_headers(document)
            confirmed = api.put(
                document["URL-Paths"], json=document["SubscribeBody"], headers=headers
            )
            assert confirmed.status_code == 204, confirmed.text
            # The signature covers that path only.
            other = api.put(
                "/v2/queues/q/subscriptions/other/confirm",
                json={"confirmed": True},
                headers=headers,
            )
            assert other.status_code == 404
            api.post_messages("q", {"body": "after"})
            assert dispatcher.run_once() == 1
            pushes = hook.wait_for(2)
            assert pushes[1].json()["body"] == "after"
            # Subscribing again once confirmed is the duplicate it is.
            again = api.post("/v2/queues/q/subscriptions", json={"subscriber": hook.url})
            assert again.status_code == 409
            # Unconfirming it tells the subscriber, with the URL to confirm it again.
            unconfirmed = api.put(
                document["URL-Paths"], json=document["UnsubscribeBody"], headers=headers
            )
            assert unconfirmed.status_code == 204, unconfirmed.text
            notice = hook.wait_for(3)[2].json()
            assert notice["Message_Type"] == "UnsubscribeConfirmation"
            assert notice["Message"] == (
                "You have unsubscribed successfully to the queue: q, you can resubscribe it "
                "by using confirmed=True."
            )
            assert notice["URL-Paths"] == document["URL-Paths"]
            assert notice["SubscribeBody"] == {"confirmed": True}
            assert api.get(f"/v2/queues/q/subscriptions/{sid}").json["confirmed"] is False
    finally:
        dispatcher.stop()


def test_a_websocket_session_s_own_subscription_needs_no_confirmation(confirming: Api) -> None:
    # The session asked for its own pushes: there is nobody to confirm, and a confirmation
    # request could not reach it, so it would never have been pushed anything.
    api = confirming
    relay = SessionRelay("127.0.0.1", max_body=1_000_000, clock=api.service.clock)
    taken: list[bytes] = []
    dispatcher = Dispatcher(api.service, senders(), require_confirmation=True, concurrency=4)
    try:
        key = "session-key"
        made = SessionSubscriber(
            relay.subscriber("a" * 32, lambda b: not taken.append(b), key), key
        )
        created = api.post(
            "/v2/queues/q/subscriptions", json={"ttl": 600}, extras={SESSION_SUBSCRIBER_ENV: made}
        )
        assert created.status_code == 201, created.text
        sid = created.json["subscription_id"]
        assert api.get(f"/v2/queues/q/subscriptions/{sid}").json["confirmed"] is True
        again = api.post(
            "/v2/queues/q/subscriptions", json={"ttl": 600}, extras={SESSION_SUBSCRIBER_ENV: made}
        )
        assert again.status_code == 201 and again.json["subscription_id"] == sid
        api.post_messages("q", {"body": "pushed"})
        assert dispatcher.run_once() == 1
        deadline = time.monotonic() + 10
        while not taken:
            assert time.monotonic() < deadline, "the session was pushed nothing"
            time.sleep(0.01)
        assert json.loads(taken[0])["body"] == "pushed"
    finally:
        dispatcher.stop()
        relay.close()


def test_a_project_subscribing_again_and_again_holds_back_no_other_confirmation(
    confirming: Api,
) -> None:
    # Each subscription again while unconfirmed asks for another confirmation request; this
    # subscriber never answers, so each would hold a sender for the whole push timeout.
    api = confirming
    with receiver(hold=True) as stuck, receiver() as other:
        for _ in range(30):
            again = api.post("/v2/queues/q/subscriptions", json={"subscriber": stuck.url})
            assert again.status_code == 201
        stuck.wait_for(1)
        subscribed = api.post(
            "/v2/queues/q/subscriptions",
            json={"subscriber": other.url},
            headers={"X-Project-ID": "another-project"},
        )
        assert subscribed.status_code == 201
        [request] = other.wait_for(1, timeout_s=5)
        assert request.json()["Message_Type"] == "SubscriptionConfirmation"
        # The requests asked for while one waited were one: the stuck subscriber is sent
        # the one in flight, and one more once it answers.
        assert len(stuck.received) == 1
        stuck.answering.set()
        assert len(stuck.wait_for(2)) == 2
        time.sleep(0.5)
        assert len(stuck.received) == 2


def test_require_confirmation_needs_a_signing_secret(tmp_path: Path) -> None:
    conf = tmp_path / "confirming.conf"
    conf.write_text("[notification]\nrequire_confirmation = true\n")
    with pytest.raises(ValueError, match=r"require_confirmation needs \[signed_url\] secret_key"):
        load_settings([str(conf)], environ={})


def test_require_confirmation_mails_mailto_subscribers_the_signed_url(
    request: pytest.FixtureRequest, smtp_inbox: tuple[int, list[Envelope]]
) -> None:
    port, received = smtp_inbox
    settings = {
        "notification": NotificationSettings(
            require_confirmation=True, smtp_host="127.0.0.1", smtp_port=port
        ),
        "signed_url": SignedUrlSettings(secret_key="s" * 32),
    }
    for api in api_on(request, "embedded", **settings):
        created = api.post(
            "/v2/queues/q/subscriptions", json={"subscriber": "mailto:ops@example.com"}
        )
        assert created.status_code == 201, created.text
        sid = created.json["subscription_id"]
        for _ in range(500):
            if received:
                break
            time.sleep(0.01)
        [envelope] = received
        assert envelope.rcpt_tos == ["ops@example.com"]
        mail = email.message_from_bytes(envelope.content, policy=email.policy.default)  # type: ignore[arg-type]
        assert mail["Subject"] == "Confirm your subscription to the queue q"
        document = json.loads(mail.get_content())  # type: ignore[attr-defined]
        assert document["URL-Paths"] == f"/v2/queues/q/subscriptions/{sid}/confirm"


def test_a_subscription_shows_its_last_push_attempt(api: Api, dispatcher: Dispatcher) -> None:
    with receiver(statuses=[503]) as hook:
        sid = subscribe(api, hook)
        before = api.get(f"/v2/queues/q/subscriptions/{sid}").json
        assert "last_delivery" not in before  # nothing attempted: as Zaqar shows it
        api.post_messages("q", {"body": "flaky"})
        dispatcher.run_once()  # 503
        hook.wait_for(1)
        failed = api.get(f"/v2/queues/q/subscriptions/{sid}").json["last_delivery"]
        assert failed["outcome"] == "retry" and "503" in failed["detail"]
        assert failed["at"] == views.timestamp_ms(api.clock.now_ms())
        api.clock.advance(seconds=2)
        dispatcher.run_once()  # retried at once: 200
        hook.wait_for(2)
        listed = api.get("/v2/queues/q/subscriptions").json["subscriptions"]
        assert listed[0]["last_delivery"] == {
            "at": views.timestamp_ms(api.clock.now_ms()),
            "outcome": "delivered",
            "detail": "",
        }
