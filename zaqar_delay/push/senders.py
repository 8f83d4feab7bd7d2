"""Which sender a push goes through: by the subscriber's scheme."""

from __future__ import annotations

from zaqar_delay.models import Delivery
from zaqar_delay.push.mail import MailSender
from zaqar_delay.push.webhook import Outcome, WebhookSender


class Senders:
    """``http(s)://`` subscribers through ``webhook``, ``mailto:`` ones through ``mail``."""

    def __init__(self, webhook: WebhookSender, mail: MailSender) -> None:
        self.webhook = webhook
        self.mail = mail
        self.timeout_s = max(webhook.timeout_s, mail.timeout_s)

    def send(self, delivery: Delivery, now_ms: int) -> Outcome:
        if delivery.subscription.subscriber.startswith("mailto:"):
            return self.mail.send(delivery, now_ms)
        return self.webhook.send(delivery, now_ms)

    def close(self) -> None:
        self.webhook.close()
        self.mail.close()
