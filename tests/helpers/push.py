"""Push helpers: a dispatcher with its senders, and subscriptions to a receiver."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

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
