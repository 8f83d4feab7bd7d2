"""Mails a test's SMTP inbox received, and the confirmation page they link to."""

from __future__ import annotations

import email
import email.message
import email.policy
import time
import urllib.parse

from aiosmtpd.smtp import Envelope

PAGE = "https://confirm.example.com/page?lang=en"


def mail_number(received: list[Envelope], count: int) -> email.message.EmailMessage:
    """The ``count``-th mail received, waited for (a confirmation is sent in the background)."""
    deadline = time.monotonic() + 5
    while len(received) < count:
        assert time.monotonic() < deadline, f"mail {count} never came"
        time.sleep(0.01)
    message = email.message_from_bytes(received[count - 1].content, policy=email.policy.default)  # type: ignore[arg-type]
    assert isinstance(message, email.message.EmailMessage)
    return message


def link_in(text: str) -> tuple[str, dict[str, str]]:
    """The page the mail's link names, and its query."""
    [link] = [word for word in text.split() if word.startswith("https://")]
    parts = urllib.parse.urlsplit(link)
    query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    return f"{parts.scheme}://{parts.netloc}{parts.path}", query
