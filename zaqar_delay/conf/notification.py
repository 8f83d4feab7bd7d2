"""Zaqar's ``[notification]``: pushes to subscribers (webhooks, mail) and the
addresses they may reach."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

from zaqar_delay.conf.options import setting


@dataclasses.dataclass(frozen=True, slots=True)
class NotificationSettings:
    """Pushes to subscribers (webhook, mail): Zaqar's ``[notification]`` options."""

    push: bool = setting(
        "notification",
        cfg.BoolOpt,
        "push",
        default=True,
        help=(
            "Whether this server process sends the pushes owed to subscribers. Any server on "
            "the store can send any push; turn it off on servers that should only answer API "
            "requests."
        ),
    )
    require_confirmation: bool = setting(
        "notification",
        cfg.BoolOpt,
        "require_confirmation",
        default=False,
        help=(
            "Zaqar's confirmation flow: a new subscription is sent a pre-signed URL to confirm "
            "itself with (needs [signed_url] secret_key), and is pushed nothing until it is "
            "confirmed."
        ),
    )
    push_timeout: float = setting(
        "notification",
        cfg.FloatOpt,
        "push_timeout",
        default=10.0,
        min=0.1,
        help="Seconds one push request may take.",
    )
    push_concurrency: int = setting(
        "notification",
        cfg.IntOpt,
        "push_concurrency",
        default=32,
        min=1,
        help="Push requests in flight at most, per server process.",
    )
    denied_networks: tuple[str, ...] = setting(
        "notification",
        cfg.ListOpt,
        "denied_networks",
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
    allowed_networks: tuple[str, ...] = setting(
        "notification",
        cfg.ListOpt,
        "allowed_networks",
        default=[],
        help=(
            "Networks pushes may reach even when denied_networks names them. A link-local or "
            "metadata address is reached only through an entry inside those networks (such "
            "as 169.254.10.0/24), never through a wider one (0.0.0.0/0)."
        ),
        convert=tuple,
    )
    smtp_host: str = setting(
        "notification",
        cfg.StrOpt,
        "smtp_host",
        default="",
        help="SMTP server of pushes to mailto: subscribers. Empty: such pushes fail.",
    )
    smtp_port: int = setting(
        "notification", cfg.PortOpt, "smtp_port", default=25, help="Port of the SMTP server."
    )
    smtp_starttls: bool = setting(
        "notification",
        cfg.BoolOpt,
        "smtp_starttls",
        default=False,
        help="Use STARTTLS with the SMTP server.",
    )
    smtp_username: str = setting(
        "notification", cfg.StrOpt, "smtp_username", default="", help="SMTP login (empty: none)."
    )
    smtp_password: str = setting(
        "notification", cfg.StrOpt, "smtp_password", default="", secret=True, help="SMTP password."
    )
    smtp_sender: str = setting(
        "notification",
        cfg.StrOpt,
        "smtp_sender",
        default="zaqar-delay@localhost",
        help="From address of push mails whose subscription sets no options.from.",
    )
    smtp_allowed_senders: tuple[str, ...] = setting(
        "notification",
        cfg.ListOpt,
        "smtp_allowed_senders",
        default=[],
        help=(
            "Addresses a subscription may set as options.from of its push mails, besides "
            "smtp_sender. Any other options.from is refused: the service would otherwise "
            "send mail in anybody's name."
        ),
        convert=tuple,
    )
