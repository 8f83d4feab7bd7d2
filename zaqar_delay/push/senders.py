"""Which sender a push goes through: by the subscriber's scheme."""

from __future__ import annotations

from zaqar_delay.models import Delivery
from zaqar_delay.push.mail import MailSender, is_mailto
from zaqar_delay.push.schedules import FireMany, ScheduleSender, is_schedule
from zaqar_delay.push.sessions import SessionSender, is_session
from zaqar_delay.push.webhook import Outcome, WebhookSender


class Senders:
    """``http(s)://`` subscribers through ``webhook``, ``mailto:`` ones through ``mail``,
    WebSocket sessions (``zaqar-ws://``) through a ``SessionSender``, schedules' ticks
    (``zaqar-schedule:``) to ``fire``."""

    def __init__(
        self, webhook: WebhookSender, mail: MailSender, fire: FireMany | None = None
    ) -> None:
        self.webhook = webhook
        self.mail = mail
        self.timeout_s = max(webhook.timeout_s, mail.timeout_s)
        self.sessions = SessionSender(webhook.timeout_s, webhook.max_body_bytes)
        self.schedules = ScheduleSender(fire)

    def send(self, delivery: Delivery, now_ms: int) -> Outcome:
        """The outcome of one attempt. A sender that raises has met input it cannot send (a
        subscription stored before today's rules, say): trying again would fail the same way,
        so it is a permanent failure, with no traceback (the dispatcher logs it in one line,
        as every push that fails for good)."""
        try:
            if is_mailto(delivery.subscription.subscriber):
                return self.mail.send(delivery, now_ms)
            if is_session(delivery.subscription.subscriber):
                return self.sessions.send(delivery, now_ms)
            if is_schedule(delivery.subscription.subscriber):
                return self.schedules.send(delivery, now_ms)
            return self.webhook.send(delivery, now_ms)
        except Exception as exc:  # noqa: BLE001 - any sender failure is this push's outcome
            return Outcome("permanent", f"the push could not be sent: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        self.webhook.close()
        self.mail.close()
