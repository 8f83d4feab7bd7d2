"""Zaqar's subscription confirmation (``[notification] require_confirmation``).

With it on, a new subscription (or one subscribed again while unconfirmed) is sent Zaqar's
``SubscriptionConfirmation`` document: a pre-signed URL (``URL-Signature``, ``URL-Paths``,
``URL-Methods``, ``URL-Expires``, ``X-Project-ID``) for ``PUT .../subscriptions/{id}/confirm``,
valid for a day, and the bodies to send there (``SubscribeBody``, ``UnsubscribeBody``). Webhooks
get it as a POST (signed like pushes, without a delivery id); ``mailto:`` subscribers as a
mail. Until the subscription is confirmed, the pushes that fall due for it are dropped. A
subscription set to ``{"confirmed": false}`` is sent Zaqar's ``UnsubscribeConfirmation``, with
the same pre-signed URL to confirm it again.

The request is sent once, in the background, by the process that answered the subscribe; a
subscriber who missed it subscribes again to be sent another.
"""

from __future__ import annotations

import concurrent.futures
import logging
from typing import Any

from zaqar_delay import jsondoc, topics
from zaqar_delay.clock import Clock
from zaqar_delay.models import Subscription
from zaqar_delay.push.mail import MailRefused, MailSender, is_mailto
from zaqar_delay.push.subscribers import redacted
from zaqar_delay.push.webhook import SIGNATURE_HEADER, Outcome, WebhookSender, signature
from zaqar_delay.signed_urls import Signer

LOG = logging.getLogger(__name__)


def confirmation_document(
    signer: Signer, project: str, queue: str, subscription_id: str, unsubscribed: bool = False
) -> dict[str, Any]:
    """Zaqar's ``SubscriptionConfirmation`` document for one subscription, or with
    ``unsubscribed`` its ``UnsubscribeConfirmation``."""
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
        "Message_Type": kind,
        "Message": message,
        "URL-Signature": signed["signature"],
        "URL-Methods": signed["methods"],
        "URL-Paths": signed["paths"],
        "URL-Expires": signed["expires"],
        "X-Project-ID": project,
        "SubscribeBody": {"confirmed": True},
        "UnsubscribeBody": {"confirmed": False},
        "queue_name": topics.public_name(queue),
    }


class Confirmations:
    """Sends confirmation requests in the background, one attempt each."""

    def __init__(
        self, signer: Signer, clock: Clock, webhook: WebhookSender, mail: MailSender
    ) -> None:
        self.signer = signer
        self.clock = clock
        self.webhook = webhook
        self.mail = mail
        self._pool = concurrent.futures.ThreadPoolExecutor(2, "zaqar-delay-confirm")

    def request(
        self, project: str, queue: str, subscription: Subscription, unsubscribed: bool = False
    ) -> concurrent.futures.Future[Outcome]:
        """Send ``subscription`` its confirmation request (``unsubscribed``: the notice that
        it was unconfirmed); the future tells how it went."""
        return self._pool.submit(self._send, project, queue, subscription, unsubscribed)

    def _send(
        self, project: str, queue: str, subscription: Subscription, unsubscribed: bool
    ) -> Outcome:
        document = confirmation_document(self.signer, project, queue, subscription.id, unsubscribed)
        body = jsondoc.dumps(document)
        stamp = signature(subscription.secret, self.clock.now_ms(), "", body.encode())
        if is_mailto(subscription.subscriber):
            subject = (
                f"You unsubscribed from the queue {queue}"
                if unsubscribed
                else f"Confirm your subscription to the queue {queue}"
            )
            try:
                mail = self.mail.compose(
                    subscription.subscriber,
                    subscription.options,
                    subject,
                    {SIGNATURE_HEADER: stamp},
                    body,
                )
            except MailRefused as exc:
                outcome = Outcome("permanent", str(exc))
            else:
                outcome = self.mail.deliver(mail)
        else:
            headers = {"Content-Type": "application/json", SIGNATURE_HEADER: stamp}
            outcome = self.webhook.post(subscription.subscriber, body.encode(), headers)
        if outcome.kind != "delivered":
            LOG.warning(
                "confirmation request to %s failed: %s (subscribing again sends another)",
                redacted(subscription.subscriber),
                outcome.error,
            )
        return outcome

    def close(self) -> None:
        self._pool.shutdown(wait=False)
