"""Zaqar's ``[signed_url]``: the secret that signs pre-signed URLs."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

from zaqar_delay.conf.options import option, options


@options("signed_url")
@dataclasses.dataclass(frozen=True, slots=True)
class SignedUrlSettings:
    """Pre-signed URLs: Zaqar's ``[signed_url]`` options."""

    secret_key: str = option(
        cfg.StrOpt,
        default="",
        secret=True,
        help=(
            "Key of the HMAC-SHA256 signatures of pre-signed URLs (POST "
            "/v2/queues/{queue}/share). Empty disables pre-signed URLs: creating one answers 403 "
            "and requests carrying URL-Signature answer 404. Every server of a deployment needs "
            "the same key."
        ),
    )
