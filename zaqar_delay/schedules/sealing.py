"""A schedule's message body at rest: sealed, as its queue's messages are, when the queue
encrypts them (``_enable_encrypt_messages``).

A schedule's definition keeps the body each fire posts for as long as the schedule lives. On a
queue that encrypts its messages it is sealed for that queue when the schedule is written
(``encryption.py``: AES-256-GCM, the project and the queue as associated data), and opened
when the definition is read (``records.py``) to be shown, changed, run or fired; the fire's
post seals its message as any post to the queue does. A body sealed with a key that is no
longer configured stays sealed: it is shown sealed, and each fire's post refuses it (no
client's body has that form), which the schedule's ``last_error`` says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from zaqar_delay import jsondoc
from zaqar_delay.encryption import MessageCipher, has_sealed_form


def is_sealed(schedule: Mapping[str, Any]) -> bool:
    """Whether the stored schedule's message body is sealed."""
    return has_sealed_form(schedule["message"]["body"])


def sealed(
    schedule: Mapping[str, Any], cipher: MessageCipher | None, project: str, target: str
) -> dict[str, Any]:
    """The checked ``schedule`` as stored: its message body sealed by ``cipher`` for the queue
    ``target`` of ``project`` (as it is with no cipher: the queue does not encrypt)."""
    if cipher is None:
        return dict(schedule)
    body = json.loads(cipher.encrypt(jsondoc.dumps(schedule["message"]["body"]), project, target))
    return {**schedule, "message": {**schedule["message"], "body": body}}


def opened(
    schedule: Mapping[str, Any], cipher: MessageCipher | None, project: str
) -> Mapping[str, Any]:
    """The stored ``schedule`` with its message body opened (itself when the body is not
    sealed, or sealed with a key ``cipher`` does not hold)."""
    if cipher is None or not is_sealed(schedule):
        return schedule
    body = cipher.decrypt(schedule["message"]["body"], project)
    return {**schedule, "message": {**schedule["message"], "body": body}}
