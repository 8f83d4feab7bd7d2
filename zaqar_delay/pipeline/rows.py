"""One input row of ``schedule``: parsed, checked with the API's rules, made into a message.

Plain Python (no Spark): the executors run these functions on every row, and the checks are
those of :mod:`zaqar_delay.validation`, the module the API itself uses, so a row is accepted
here exactly when the API would accept it as a message.

A raw row maps the input columns (``RAW_COLUMNS``) to text or None, whatever the file format
was: numbers arrive as their decimal text, ``body`` as JSON text.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from zaqar_delay import errors, jsondoc, validation
from zaqar_delay.conf import Limits

RAW_COLUMNS = ("queue", "body", "delay", "deliver_at", "ttl", "dedup_id")
REQUIRED_COLUMNS = ("queue", "body")
INTEGER_TEXT = re.compile(r"-?[0-9]+")
# Bytes of '{"messages":[' + ']}' around the messages of a post.
POST_ENVELOPE = 15
# Bytes Prepared.document adds to message_json at most: ',"deliver_at":' and 13 digits of ms.
DUE_FIELD_BYTES = len(',"deliver_at":') + 13


@dataclasses.dataclass(frozen=True, slots=True)
class Prepared:
    """A valid row, ready to post: ``message_json`` lacks only the due time, which depends on
    when it is posted (``delay_ms`` after that, or at ``deliver_at_ms``)."""

    queue: str
    message_json: str
    delay_ms: int | None
    deliver_at_ms: int | None
    dedup_id: str

    def sent_size(self) -> int:
        """The most bytes :meth:`document` can be."""
        return len(self.message_json) + DUE_FIELD_BYTES

    def document(self, now_ms: int) -> str:
        """The message as it is sent at ``now_ms``: always with ``deliver_at``, so a delay is
        honoured on every queue (the API ignores ``delay`` on queues without a default delay),
        and a time that passed while the job ran means "now"."""
        due = now_ms + self.delay_ms if self.delay_ms is not None else self.deliver_at_ms
        assert due is not None
        return f'{self.message_json[:-1]},"deliver_at":{max(due, now_ms)}}}'


def _integer(value: str | None) -> Any:
    """Decimal text as an int; anything else as it is, for the API's rule to refuse."""
    if value is not None and INTEGER_TEXT.fullmatch(value.strip()):
        return int(value)
    return value


def derived_dedup_id(project: str, raw: Mapping[str, str | None]) -> str:
    """A dedup id from the row's content: the same row, read again by a retried task or a
    rerun of the job, gets the same id, so it is never posted twice."""
    content = json.dumps([project, *(raw.get(c) for c in RAW_COLUMNS[:5])])
    return "zdp-" + hashlib.sha256(content.encode()).hexdigest()[:40]


def prepare(
    raw: Mapping[str, str | None], project: str, limits: Limits, now_ms: int
) -> Prepared | str:
    """The row as a message to post, or the reason it is refused (the API's wording)."""
    try:
        return _prepare(raw, project, limits, now_ms)
    except errors.ZaqarDelayError as exc:
        return exc.description


def _prepare(raw: Mapping[str, str | None], project: str, limits: Limits, now_ms: int) -> Prepared:
    missing = [c for c in REQUIRED_COLUMNS if raw.get(c) is None]
    if missing:
        raise errors.InvalidRequest(f"Missing value of {', '.join(missing)}.")
    queue = validation.queue_name(str(raw["queue"]))
    try:
        body = jsondoc.loads(str(raw["body"]).encode())
    except errors.ZaqarDelayError as exc:
        raise errors.InvalidRequest(f"body is not JSON text: {exc.description}") from exc
    document: dict[str, Any] = {"body": body}
    for name in ("ttl", "delay", "deliver_at"):
        if raw.get(name) is not None:
            document[name] = _integer(raw[name])
    dedup_id = raw.get("dedup_id") or derived_dedup_id(project, raw)
    document["dedup_id"] = dedup_id
    # The API's own check of a message. A row's delay is honoured on every queue (see
    # Prepared.document), so it is checked as on a delayed queue whose default is that delay.
    message = validation.new_message(
        document, limits.default_message_ttl, _integer(raw.get("delay")) or 0, now_ms, limits
    )
    message_json = jsondoc.dumps({"body": body, "ttl": message.ttl_s, "dedup_id": message.dedup_id})
    if len(message_json) + DUE_FIELD_BYTES + POST_ENVELOPE > limits.max_messages_post_size:
        raise errors.InvalidRequest(
            f"Message collection size is too large. Max size {limits.max_messages_post_size}"
        )
    if "deliver_at" in document:
        return Prepared(queue, message_json, None, now_ms + message.delay_ms, dedup_id)
    return Prepared(queue, message_json, message.delay_ms, None, dedup_id)
