"""Zaqar's ``[notification]``: pushes to subscribers (webhooks, mail) and the
addresses they may reach."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from oslo_config import cfg

from zaqar_delay.conf.options import option, options


@dataclasses.dataclass(frozen=True, slots=True)
class MailTemplate:
    """Zaqar's confirmation mail template: its subject (``topic``), its text (``body``, in
    which ``{0}`` is the queue's name, ``{1}`` the project and ``{2}`` the confirmation link)
    and its sender."""

    topic: str
    body: str
    sender: str

    def text(self, queue: str, project: str, link: str) -> str:
        return self.body.format(queue, project, link)


def mail_template(value: Mapping[str, str]) -> MailTemplate:
    """The template a ``DictOpt`` of Zaqar's form describes (ValueError, naming what is wrong,
    when a key is missing or ``body`` has a placeholder other than {0}, {1} and {2})."""
    missing = sorted({"topic", "body", "sender"} - set(value))
    if missing:
        raise ValueError(f"a confirmation mail template needs {', '.join(missing)}")
    template = MailTemplate(value["topic"], value["body"], value["sender"])
    if any(ord(c) < 32 or ord(c) == 127 for c in template.topic + template.sender):
        raise ValueError("a confirmation mail template's topic and sender are one line each")
    try:
        template.text("queue", "project", "link")
    except (IndexError, KeyError, ValueError) as exc:
        raise ValueError(
            "a confirmation mail template's body may use {0} (queue), {1} (project) and {2} "
            f"(link) only: {exc!r}"
        ) from None
    return template


_SENDER = "Zaqar Notifications <no-reply@openstack.org>"


@options("notification")
@dataclasses.dataclass(frozen=True, slots=True)
class NotificationSettings:
    """Pushes to subscribers (webhook, mail): Zaqar's ``[notification]`` options."""

    push: bool = option(
        cfg.BoolOpt,
        default=True,
        help=(
            "Whether this server process sends the pushes owed to subscribers. Any server on "
            "the store can send any push; turn it off on servers that should only answer API "
            "requests."
        ),
    )
    require_confirmation: bool = option(
        cfg.BoolOpt,
        default=False,
        help=(
            "Zaqar's confirmation flow: a new subscription is sent a pre-signed URL to confirm "
            "itself with (needs [signed_url] secret_key), and is pushed nothing until it is "
            "confirmed."
        ),
    )
    push_timeout: float = option(
        cfg.FloatOpt, default=10.0, min=0.1, help="Seconds one push request may take."
    )
    push_concurrency: int = option(
        cfg.IntOpt, default=32, min=1, help="Push requests in flight at most, per server process."
    )
    denied_networks: tuple[str, ...] = option(
        cfg.ListOpt,
        default=[],
        help=(
            "Networks pushes may not reach, besides those always denied: the unspecified "
            "addresses (0.0.0.0/8, ::), and link-local and cloud metadata addresses "
            "(169.254.0.0/16, fe80::/10, fd00:ec2::254/128, 100.100.100.200/32). IPv6 forms "
            "of an IPv4 address (::ffff:a.b.c.d, NAT64, 6to4, ...) are matched as that "
            "address. Checked when subscribing and before every connection. With "
            "auth_strategy = keystone, also denied by default: loopback, RFC 1918, CGNAT "
            "(100.64.0.0/10), unique-local IPv6 (fc00::/7) and every address of this "
            "machine's interfaces; allowed_networks reopens them."
        ),
        convert=tuple,
    )
    allowed_networks: tuple[str, ...] = option(
        cfg.ListOpt,
        default=[],
        help=(
            "Networks pushes may reach even when denied_networks names them. A link-local or "
            "metadata address is reached only through an entry inside those networks (such "
            "as 169.254.10.0/24), never through a wider one (0.0.0.0/0)."
        ),
        convert=tuple,
    )
    smtp_host: str = option(
        cfg.StrOpt,
        default="",
        help="SMTP server of pushes to mailto: subscribers. Empty: such pushes fail.",
    )
    smtp_port: int = option(cfg.PortOpt, default=25, help="Port of the SMTP server.")
    smtp_starttls: bool = option(
        cfg.BoolOpt, default=False, help="Use STARTTLS with the SMTP server."
    )
    smtp_username: str = option(cfg.StrOpt, default="", help="SMTP login (empty: none).")
    smtp_password: str = option(cfg.StrOpt, default="", secret=True, help="SMTP password.")
    smtp_sender: str = option(
        cfg.StrOpt,
        default="zaqar-delay@localhost",
        help="From address of push mails whose subscription sets no options.from.",
    )
    smtp_allowed_senders: tuple[str, ...] = option(
        cfg.ListOpt,
        default=[],
        help=(
            "Addresses a subscription may set as options.from of its push mails, besides "
            "smtp_sender. Any other options.from is refused: the service would otherwise "
            "send mail in anybody's name."
        ),
        convert=tuple,
    )
    external_confirmation_url: str = option(
        cfg.StrOpt,
        default="",
        help=(
            "With require_confirmation: the page a mailto: subscriber's confirmation mail "
            "links to, as in Zaqar. The link adds Signature, Methods, Paths, Project, Expires, "
            "Url and Queue query parameters (the pre-signed request that confirms the "
            "subscription); the mail is written from the templates below. Empty: the mail "
            "holds the confirmation request as JSON, as a webhook receives it."
        ),
    )
    subscription_confirmation_email_template: MailTemplate = option(
        cfg.DictOpt,
        default={
            "topic": "Zaqar Notification - Subscription Confirmation",
            "body": (
                "You have chosen to subscribe to the queue: {0}. This queue belongs to "
                "project: {1}. To confirm this subscription, click or visit this link below: "
                "{2}"
            ),
            "sender": _SENDER,
        },
        help=(
            "Subject (topic), text (body: {0} the queue, {1} the project, {2} the link) and "
            "sender of the confirmation mail, with external_confirmation_url."
        ),
        convert=mail_template,
    )
    unsubscribe_confirmation_email_template: MailTemplate = option(
        cfg.DictOpt,
        default={
            "topic": "Zaqar Notification - Unsubscribe Confirmation",
            "body": (
                "You have unsubscribed successfully to the queue: {0}. This queue belongs to "
                "project: {1}. To resubscribe this subscription, click or visit this link "
                "below: {2}"
            ),
            "sender": _SENDER,
        },
        help=(
            "Subject, text and sender of the mail sent when a subscription is set to "
            '{"confirmed": false}, with external_confirmation_url (the link confirms it again).'
        ),
        convert=mail_template,
    )
