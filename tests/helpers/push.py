"""Push helpers: a dispatcher with its senders, subscriptions to a receiver, and the push
attempts a running server counted."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import requests
from prometheus_client.parser import text_string_to_metric_families

from testbed.receiver import Receiver
from tests.helpers.api import Api
from zaqar_delay.keystone.trusts import Trusts
from zaqar_delay.push.dispatcher import Dispatcher
from zaqar_delay.push.guard import AddressGuard
from zaqar_delay.push.mail import MailSender
from zaqar_delay.push.schedules import FireMany
from zaqar_delay.push.senders import Senders
from zaqar_delay.push.webhook import WebhookSender


def senders(
    guard: AddressGuard | None = None,
    smtp_port: int = 0,
    allowed_senders: tuple[str, ...] = (),
    trusts: Trusts | None = None,
    fire: FireMany | None = None,
) -> Senders:
    """Webhooks through ``guard`` (with the tokens of ``trusts``); mail through an SMTP
    server on ``smtp_port`` (0: none), from zd@example.com or ``allowed_senders``; schedules'
    ticks to ``fire``."""
    host = "127.0.0.1" if smtp_port else ""
    mail = MailSender(host, smtp_port, "zd@example.com", 5, allowed_senders=allowed_senders)
    webhook = WebhookSender(guard or AddressGuard(), timeout_s=5, trusts=trusts)
    return Senders(webhook, mail, fire)


def subscribe(api: Api, hook: Receiver, queue: str = "q", **options: object) -> str:
    created = api.post(
        f"/v2/queues/{queue}/subscriptions", json={"subscriber": hook.url, "options": options}
    )
    assert created.status_code == 201, created.text
    return str(created.json["subscription_id"])


@contextmanager
def dispatching(api: Api, sender: Senders | None = None) -> Iterator[Dispatcher]:
    """A dispatcher on the API's store and clock (through ``sender``; default: the guard's
    defaults, no SMTP server), stopped afterwards."""
    chosen = sender or senders(fire=api.service.schedules.fire_many)
    dispatcher = Dispatcher(api.service, chosen, concurrency=4)
    try:
        yield dispatcher
    finally:
        dispatcher.stop()


def attempts_by_outcome(url: str) -> dict[str, float]:
    """The push attempts the server's processes have settled, by outcome (delivered, retry,
    failed)."""
    text = requests.get(f"{url}/metrics", timeout=10).text
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "zaqar_delay_push_attempts":
            for sample in family.samples:
                if sample.name == "zaqar_delay_push_attempts_total":
                    outcome = sample.labels["outcome"]
                    counts[outcome] = counts.get(outcome, 0) + sample.value
    return counts


def last_outcome(url: str, queue: str, headers: dict[str, str]) -> str:
    """The outcome of the last push attempt the queue's one subscription records, as the
    server at ``url`` shows it."""
    listed = requests.get(f"{url}/v2/queues/{queue}/subscriptions", headers=headers, timeout=10)
    [shown] = listed.json()["subscriptions"]
    assert "last_delivery" in shown, f"no attempt recorded: {shown}"
    return str(shown["last_delivery"]["outcome"])


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def served(app: Any) -> Iterator[str]:
    """``app`` (a WSGI application, such as the API's) served over HTTP on a loopback port,
    for pushes to reach it; its base URL."""
    server = make_server("127.0.0.1", 0, app, handler_class=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
