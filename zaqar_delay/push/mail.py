"""One push of a message to a ``mailto:`` subscriber, through the configured SMTP server.

As in Zaqar, the mail's text is the message as the API shows it plus ``queue_name`` (JSON);
its subject is the subscriber's ``?subject=`` or the subscription's ``options.subject``, its
sender ``options.from`` or ``[notification] smtp_sender``. The delivery id and signature
headers of webhooks are sent as mail headers too. A 4xx SMTP answer or a connection failure is
retried; a 5xx answer is permanent.
"""

from __future__ import annotations

import email.message
import smtplib
import urllib.parse

from zaqar_delay import jsondoc
from zaqar_delay.models import Delivery
from zaqar_delay.push.webhook import (
    ATTEMPT_HEADER,
    DELIVERY_ID_HEADER,
    SIGNATURE_HEADER,
    Outcome,
    message_document,
    signature,
)


class MailSender:
    """Sends pushes to ``mailto:`` subscribers through ``host:port`` (none: they fail)."""

    def __init__(
        self,
        host: str,
        port: int,
        sender: str,
        timeout_s: float,
        starttls: bool = False,
        username: str = "",
        password: str = "",
    ) -> None:
        self.host = host
        self.port = port
        self.sender = sender
        self.timeout_s = timeout_s
        self.starttls = starttls
        self.username = username
        self.password = password

    def mail(self, delivery: Delivery, now_ms: int) -> email.message.EmailMessage:
        subscriber = urllib.parse.urlsplit(delivery.subscription.subscriber)
        query = {k.lower(): v for k, v in urllib.parse.parse_qs(subscriber.query).items()}
        options = delivery.subscription.options
        body = jsondoc.dumps(message_document(delivery, now_ms))
        mail = email.message.EmailMessage()
        mail["To"] = urllib.parse.unquote(subscriber.path)
        mail["From"] = str(options.get("from") or self.sender)
        mail["Subject"] = (query.get("subject") or [str(options.get("subject") or "")])[0]
        mail[DELIVERY_ID_HEADER] = delivery.id
        mail[ATTEMPT_HEADER] = str(delivery.attempts + 1)
        mail[SIGNATURE_HEADER] = signature(delivery.subscription.secret, now_ms, body.encode())
        mail.set_content(body)
        return mail

    def send(self, delivery: Delivery, now_ms: int) -> Outcome:
        return self.deliver(self.mail(delivery, now_ms))

    def deliver(self, mail: email.message.EmailMessage) -> Outcome:
        """Hand ``mail`` to the SMTP server once."""
        if not self.host:
            return Outcome("permanent", "no SMTP server is configured ([notification] smtp_host)")
        try:
            with smtplib.SMTP(self.host, self.port, timeout=self.timeout_s) as smtp:
                if self.starttls:
                    smtp.starttls()
                if self.username:
                    smtp.login(self.username, self.password)
                smtp.send_message(mail)
        except smtplib.SMTPRecipientsRefused as exc:
            codes = [code for code, _ in exc.recipients.values()]
            kind = "retry" if all(400 <= c < 500 for c in codes) else "permanent"
            return Outcome(kind, f"SMTP refused the recipient: {exc.recipients}")
        except smtplib.SMTPResponseException as exc:
            kind = "retry" if 400 <= exc.smtp_code < 500 else "permanent"
            return Outcome(kind, f"SMTP {exc.smtp_code}: {exc.smtp_error!r}")
        except (OSError, smtplib.SMTPException) as exc:
            return Outcome("retry", f"SMTP failed: {exc}")
        return Outcome("delivered")

    def close(self) -> None:
        pass
