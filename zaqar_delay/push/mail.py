"""One push of a message to a ``mailto:`` subscriber, through the configured SMTP server, and the
rules that keep a subscriber from turning the service into a mail relay.

As in Zaqar, the mail's text is the message as the API shows it plus ``queue_name`` (JSON);
its subject is the subscriber's ``?subject=`` or the subscription's ``options.subject``, its
sender ``options.from`` or ``[notification] smtp_sender``. The delivery id and signature
headers of webhooks are sent as mail headers too, unfolded, so a receiver checks the signature
as it arrives. A 4xx SMTP answer or a connection failure is retried; a 5xx answer is permanent.

The rules (:class:`MailRules`), checked when subscribing and again when sending: a subscriber
names exactly one address (no list in the path, no ``to``/``cc``/``bcc`` in the query); a
subject holds no control characters; ``options.from`` is ``smtp_sender`` or one of
``[notification] smtp_allowed_senders``.
"""

from __future__ import annotations

import dataclasses
import email.message
import email.policy
import re
import smtplib
import urllib.parse
from collections.abc import Mapping
from typing import Any

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

# One addr-spec: a dot-atom local part and a host name (no lists, comments or display names).
ADDRESS = re.compile(
    r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*$"
)
MAX_ADDRESS = 254
MAX_SUBJECT = 255
# Printable characters and spaces only: a CR or LF would start a header of its own.
SUBJECT = re.compile(r"^[^\x00-\x1f\x7f]*$")
RECIPIENT_FIELDS = frozenset({"to", "cc", "bcc"})
# Headers are never folded (RFC 5322's limit is 998): a folded signature would arrive
# RFC 2047-encoded and no longer match what the receiver computes.
MAIL_POLICY = email.policy.SMTP.clone(max_line_length=998)


def is_mailto(subscriber: str) -> bool:
    """Whether ``subscriber`` is a ``mailto:`` URI (its scheme in any case)."""
    return subscriber[:7].lower() == "mailto:"


class MailRefused(ValueError):
    """A ``mailto:`` subscriber or its options break a rule of :class:`MailRules`."""


def recipient(subscriber: str) -> str:
    """The one address a ``mailto:`` subscriber names (MailRefused: none, or several)."""
    parts = urllib.parse.urlsplit(subscriber)
    address = urllib.parse.unquote(parts.path)
    if len(address) > MAX_ADDRESS or not ADDRESS.match(address):
        raise MailRefused(
            "A mailto: subscriber names exactly one e-mail address, such as mailto:ops@example.com."
        )
    fields = {key.lower() for key in urllib.parse.parse_qs(parts.query)}
    if fields & RECIPIENT_FIELDS:
        raise MailRefused("A mailto: subscriber may not add recipients (to, cc or bcc).")
    return address


def subject(subscriber: str, options: Mapping[str, Any]) -> str:
    """The subject of the subscriber's ``?subject=``, else of ``options.subject`` (MailRefused:
    not a one-line text)."""
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(subscriber).query)
    found = {key.lower(): values for key, values in query.items()}.get("subject")
    text = found[0] if found else options.get("subject") or ""
    if not isinstance(text, str) or len(text) > MAX_SUBJECT or not SUBJECT.match(text):
        raise MailRefused(
            f"A mail subject is one line of at most {MAX_SUBJECT} characters, without control "
            "characters."
        )
    return text


@dataclasses.dataclass(frozen=True, slots=True)
class MailRules:
    """The configured sender, and the other senders a subscription may name."""

    sender: str
    allowed_senders: tuple[str, ...] = ()

    def from_address(self, options: Mapping[str, Any]) -> str:
        """``options.from`` if it is an allowed sender, the configured one when unset
        (MailRefused: another address)."""
        wanted = options.get("from")
        if not wanted:
            return self.sender
        allowed = {self.sender.lower(), *(a.lower() for a in self.allowed_senders)}
        if not isinstance(wanted, str) or wanted.lower() not in allowed:
            raise MailRefused(
                f"options.from must be {self.sender}"
                + (f" or one of {', '.join(self.allowed_senders)}" if self.allowed_senders else "")
                + " ([notification] smtp_allowed_senders)."
            )
        return wanted

    def check(self, subscriber: str | None, options: Mapping[str, Any] | None) -> None:
        """MailRefused when ``subscriber`` (if a ``mailto:`` one) or ``options`` break a rule."""
        options = options or {}
        self.from_address(options)
        if subscriber is not None and is_mailto(subscriber):
            recipient(subscriber)
            subject(subscriber, options)
        elif options.get("subject") is not None:
            subject("", options)


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
        allowed_senders: tuple[str, ...] = (),
    ) -> None:
        self.host = host
        self.port = port
        self.rules = MailRules(sender, allowed_senders)
        self.timeout_s = timeout_s
        self.starttls = starttls
        self.username = username
        self.password = password

    def compose(
        self,
        subscriber: str,
        options: Mapping[str, Any],
        subject_text: str,
        headers: Mapping[str, str],
        text: str,
        sender: str | None = None,
    ) -> email.message.EmailMessage:
        """A mail to the subscriber's one address (MailRefused: the rules are broken), from
        ``sender`` (the operator's, configured) or else the subscription's allowed sender."""
        mail = email.message.EmailMessage(policy=MAIL_POLICY)
        mail["To"] = recipient(subscriber)
        mail["From"] = sender or self.rules.from_address(options)
        mail["Subject"] = subject_text
        for name, value in headers.items():
            mail[name] = value
        mail.set_content(text)
        return mail

    def mail(self, delivery: Delivery, now_ms: int) -> email.message.EmailMessage:
        """The push mail of ``delivery``, signed at ``now_ms``."""
        subscription = delivery.subscription
        body = jsondoc.dumps(message_document(delivery, now_ms))
        stamp = signature(subscription.secret, now_ms, delivery.id, body.encode())
        headers = {
            DELIVERY_ID_HEADER: delivery.id,
            ATTEMPT_HEADER: str(delivery.attempts + 1),
            SIGNATURE_HEADER: stamp,
        }
        subject_text = subject(subscription.subscriber, subscription.options)
        return self.compose(
            subscription.subscriber, subscription.options, subject_text, headers, body
        )

    def send(self, delivery: Delivery, now_ms: int) -> Outcome:
        try:
            mail = self.mail(delivery, now_ms)
        except MailRefused as exc:
            return Outcome("permanent", str(exc))
        return self.deliver(mail)

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
