"""Zaqar's subscription confirmation (``[notification] require_confirmation``).

With it on, a new subscription (or one subscribed again while unconfirmed) is sent Zaqar's
``SubscriptionConfirmation`` document: a pre-signed URL (``URL-Signature``, ``URL-Paths``,
``URL-Methods``, ``URL-Expires``, ``X-Project-ID``) for ``PUT .../subscriptions/{id}/confirm``,
valid for a day, and the bodies to send there (``SubscribeBody``, ``UnsubscribeBody``). Webhooks
get it as a POST (signed like pushes, without a delivery id); ``mailto:`` subscribers as a
mail. Until the subscription is confirmed, the pushes that fall due for it are dropped. A
subscription set to ``{"confirmed": false}`` is sent Zaqar's ``UnsubscribeConfirmation``, with
the same pre-signed URL to confirm it again.

With ``[notification] external_confirmation_url``, as in Zaqar, a ``mailto:`` subscriber is
mailed a text from the configured template instead, with a link to that page whose query holds
the pre-signed request (``Signature``, ``Methods``, ``Paths``, ``Project``, ``Expires``,
``Url``, ``Queue``); without it the mail holds the JSON document (Zaqar sends no mail then).

Under keystone, as in Zaqar, the document also names the request's URLs at the public
endpoints of the services ``zaqar`` and ``zaqar-websocket`` in Keystone's catalog
(``WSGISubscribeURL``, ``WebSocketSubscribeURL``; ``keystone/catalog.py``), and the page's
``Url`` is the first.

The request is sent once, in the background, by the process that answered the subscribe; a
subscriber who missed it subscribes again to be sent another.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import logging
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from zaqar_delay import jsondoc, topics
from zaqar_delay.clock import Clock
from zaqar_delay.conf.notification import MailTemplate, NotificationSettings
from zaqar_delay.models import Subscription
from zaqar_delay.push.fair_sends import FairSends
from zaqar_delay.push.mail import MailRefused, MailSender, is_mailto
from zaqar_delay.push.subscribers import redacted
from zaqar_delay.push.webhook import SIGNATURE_HEADER, Outcome, WebhookSender, signature
from zaqar_delay.signed_urls import Signer

LOG = logging.getLogger(__name__)

# Threads sending confirmation requests, per server process; each may wait a push timeout on
# a subscriber that does not answer. Projects are served in turn (push/fair_sends.py).
SEND_THREADS = 2
# Confirmation requests of one project waiting to be sent, at most: past it one is not sent
# (subscribing again later sends another).
WAITING_PER_PROJECT = 100


# The URLs of a confirmation's path at the API's public endpoints, by field (Zaqar's
# ``WSGISubscribeURL``, ``WebSocketSubscribeURL``); none where none is known.
PublicUrls = Callable[[str], Mapping[str, str]]


def confirmation_document(
    signer: Signer,
    project: str,
    queue: str,
    subscription_id: str,
    unsubscribed: bool = False,
    public_urls: PublicUrls | None = None,
) -> dict[str, Any]:
    """Zaqar's ``SubscriptionConfirmation`` document for one subscription, or with
    ``unsubscribed`` its ``UnsubscribeConfirmation``; with the URLs ``public_urls`` gives
    for the path to confirm at."""
    path = f"{topics.href(queue)}/subscriptions/{subscription_id}/confirm"
    resource, name = topics.kind(queue), topics.public_name(queue)
    signed = signer.sign(project, [path], ["PUT"])
    if unsubscribed:
        kind = "UnsubscribeConfirmation"
        message = (
            f"You have unsubscribed successfully to the {resource}: {name}, you can resubscribe "
            "it by using confirmed=True."
        )
    else:
        kind, message = (
            "SubscriptionConfirmation",
            f"You have chosen to subscribe to the {resource}: {name}",
        )
    return {
        **(public_urls(path) if public_urls is not None else {}),
        "Message_Type": kind,
        "Message": message,
        "URL-Signature": signed["signature"],
        # One method and one path, as strings as in Zaqar: the header values to send.
        "URL-Methods": ",".join(signed["methods"]),
        "URL-Paths": ",".join(signed["paths"]),
        "URL-Expires": signed["expires"],
        "X-Project-ID": project,
        "SubscribeBody": {"confirmed": True},
        "UnsubscribeBody": {"confirmed": False},
        "queue_name": topics.public_name(queue),
    }


@dataclasses.dataclass(frozen=True, slots=True)
class ConfirmationPage:
    """Zaqar's ``external_confirmation_url`` and the templates of the mails that link to it."""

    url: str
    subscribe: MailTemplate
    unsubscribe: MailTemplate

    def link(self, document: Mapping[str, Any]) -> str:
        """The page's URL with the pre-signed request of ``document`` in its query, under
        Zaqar's names (``Url``: the request's public URL, ``WSGISubscribeURL``; empty when
        Keystone's catalog gave none, and the page must know where the API is)."""
        query = urllib.parse.urlencode(
            [
                ("Signature", document["URL-Signature"]),
                ("Methods", document["URL-Methods"]),
                ("Paths", document["URL-Paths"]),
                ("Project", document["X-Project-ID"]),
                ("Expires", document["URL-Expires"]),
                ("Url", document.get("WSGISubscribeURL", "")),
                ("Queue", document["queue_name"]),
            ]
        )
        return f"{self.url}{'&' if '?' in self.url else '?'}{query}"

    def mail(self, document: Mapping[str, Any], unsubscribed: bool) -> tuple[str, str, str]:
        """The subject, text and sender of the mail that links to the page."""
        template = self.unsubscribe if unsubscribed else self.subscribe
        text = template.text(document["queue_name"], document["X-Project-ID"], self.link(document))
        return template.topic, text, template.sender


def confirmation_page(settings: NotificationSettings) -> ConfirmationPage | None:
    """The confirmation page ``[notification]`` names (None without
    ``external_confirmation_url``)."""
    if not settings.external_confirmation_url:
        return None
    return ConfirmationPage(
        settings.external_confirmation_url,
        settings.subscription_confirmation_email_template,
        settings.unsubscribe_confirmation_email_template,
    )


class Confirmations:
    """Sends confirmation requests in the background, one attempt each."""

    def __init__(
        self,
        signer: Signer,
        clock: Clock,
        webhook: WebhookSender,
        mail: MailSender,
        page: ConfirmationPage | None = None,
        public_urls: PublicUrls | None = None,
    ) -> None:
        """``page``: where mails to ``mailto:`` subscribers link (None: they hold the JSON
        document); ``public_urls``: the request's URLs at the API's public endpoints (None:
        the documents name none)."""
        self.public_urls = public_urls
        self.signer = signer
        self.clock = clock
        self.webhook = webhook
        self.mail = mail
        self.page = page
        self._sends: FairSends[Outcome] = FairSends(
            SEND_THREADS, WAITING_PER_PROJECT, "zaqar-delay-confirm"
        )

    def request(
        self, project: str, queue: str, subscription: Subscription, unsubscribed: bool = False
    ) -> concurrent.futures.Future[Outcome]:
        """Send ``subscription`` its confirmation request (``unsubscribed``: the notice that
        it was unconfirmed); the future tells how it went. The same request asked for again
        while it waits is sent once; one past the project's ``WAITING_PER_PROJECT`` is not
        sent (``unsent``)."""
        key = (project, queue, subscription.id, subscription.subscriber, unsubscribed)
        send = functools.partial(self._send, project, queue, subscription, unsubscribed)
        future = self._sends.submit(project, key, send)
        if future is None:
            LOG.warning(
                "confirmation request to %s not sent: project %s has %d waiting already "
                "(subscribing again later sends another)",
                redacted(subscription.subscriber),
                project,
                WAITING_PER_PROJECT,
            )
            future = concurrent.futures.Future()
            future.set_result(Outcome("unsent", "too many confirmation requests waiting"))
        return future

    def _send(
        self, project: str, queue: str, subscription: Subscription, unsubscribed: bool
    ) -> Outcome:
        document = confirmation_document(
            self.signer, project, queue, subscription.id, unsubscribed, self.public_urls
        )
        if is_mailto(subscription.subscriber):
            outcome = self._mail(subscription, document, unsubscribed)
        else:
            body = jsondoc.dumps(document)
            headers = {
                "Content-Type": "application/json",
                SIGNATURE_HEADER: self._stamp(subscription, body),
            }
            outcome = self.webhook.post(subscription.subscriber, body.encode(), headers)
        if outcome.kind != "delivered":
            LOG.warning(
                "confirmation request to %s failed: %s (subscribing again sends another)",
                redacted(subscription.subscriber),
                outcome.error,
            )
        return outcome

    def _mail(
        self, subscription: Subscription, document: Mapping[str, Any], unsubscribed: bool
    ) -> Outcome:
        """Mail ``document`` to a ``mailto:`` subscriber: a link to the confirmation page when
        there is one, else the document itself."""
        sender: str | None = None
        if self.page is not None:
            subject, text, sender = self.page.mail(document, unsubscribed)
        else:
            queue = document["queue_name"]
            subject = (
                f"You unsubscribed from the queue {queue}"
                if unsubscribed
                else f"Confirm your subscription to the queue {queue}"
            )
            text = jsondoc.dumps(document)
        try:
            mail = self.mail.compose(
                subscription.subscriber,
                subscription.options,
                subject,
                {SIGNATURE_HEADER: self._stamp(subscription, text)},
                text,
                sender,
            )
        except MailRefused as exc:
            return Outcome("permanent", str(exc))
        return self.mail.deliver(mail)

    def _stamp(self, subscription: Subscription, text: str) -> str:
        """The signature of a confirmation request's ``text``, as pushes are signed (without a
        delivery id)."""
        return signature(subscription.secret, self.clock.now_ms(), "", text.encode())

    def close(self) -> None:
        self._sends.close()
