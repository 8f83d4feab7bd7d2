"""Turns models into the JSON documents of the v2 API."""

from __future__ import annotations

import datetime
import hashlib
import json
from typing import Any

from zaqar_delay import topics
from zaqar_delay.models import Claim, Message, QueueInfo, QueueStats, Subscription


def queue_href(queue: str) -> str:
    return topics.href(queue)


def message_href(queue: str, message_id: str, claim_id: str | None = None) -> str:
    href = f"{topics.href(queue)}/messages/{message_id}"
    return f"{href}?claim_id={claim_id}" if claim_id else href


def claim_href(queue: str, claim_id: str) -> str:
    return f"{topics.href(queue)}/claims/{claim_id}"


def checksum(body: Any) -> str:
    """Zaqar's message checksum: "MD5:" and the hex MD5 of the body as Python's ``json.dumps``
    writes it (default separators, keys in the body's order, ASCII escapes)."""
    text = json.dumps(body).encode()
    return "MD5:" + hashlib.md5(text, usedforsecurity=False).hexdigest()


def message(
    queue: str, m: Message, now_ms: int, schedule: bool = False, with_checksum: bool = False
) -> dict[str, Any]:
    """The message object every read returns; ``href`` names the live claim, if any.

    ``schedule`` (the ``with_schedule=true`` extension) adds ``due`` and ``claim_count``:
    opt-in, because python-zaqarclient builds its Message objects from these keys and
    refuses ones it does not know (it knows ``claim_count`` but not ``due``).
    ``with_checksum`` (``[DEFAULT] enable_checksum``) adds Zaqar's ``checksum``.
    """
    shown = {
        "id": m.id,
        "href": message_href(queue, m.id, m.claim_id),
        "ttl": m.ttl_s,
        "age": m.age_s(now_ms),
        "body": m.body,
    }
    if with_checksum:
        shown["checksum"] = checksum(m.body)
    if schedule:
        shown["due"] = timestamp_ms(m.due_ms)
        shown["claim_count"] = m.claim_count
    return shown


def popped_message(m: Message, now_ms: int, with_checksum: bool = False) -> dict[str, Any]:
    """Pop returns Zaqar's raw storage form (no href)."""
    shown = {
        "id": m.id,
        "body": m.body,
        "ttl": m.ttl_s,
        "age": m.age_s(now_ms),
        "claim_id": None,
        "claim_count": m.claim_count,
    }
    if with_checksum:
        shown["checksum"] = checksum(m.body)
    return shown


def claim(
    queue: str, c: Claim, now_ms: int, schedule: bool = False, with_checksum: bool = False
) -> dict[str, Any]:
    return {
        "age": c.age_s(now_ms),
        "ttl": c.ttl_s,
        "href": claim_href(queue, c.id),
        "messages": [message(queue, m, now_ms, schedule, with_checksum) for m in c.messages],
    }


def _created(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def timestamp_ms(ms: int) -> str:
    """RFC 3339 UTC with milliseconds, the form of every zaqar-delay extension time."""
    moment = datetime.datetime.fromtimestamp(ms // 1000, datetime.UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


def stats(queue: str, s: QueueStats, now_ms: int) -> dict[str, Any]:
    counts: dict[str, Any] = {
        "claimed": s.claimed,
        "free": s.free,
        "total": s.total,
        "delayed": s.delayed,
    }
    if s.next_due_ms is not None:
        counts["next_due"] = timestamp_ms(s.next_due_ms)
    for name, ref in (("oldest", s.oldest), ("newest", s.newest)):
        if ref is not None and s.total:
            counts[name] = {
                "age": max(0, (now_ms - ref.created_ms) // 1000),
                "created": _created(ref.created_ms),
                "href": message_href(queue, ref.id),
            }
    return {"messages": counts}


def subscription(s: Subscription, now_ms: int) -> dict[str, Any]:
    """A subscription as Zaqar shows it (its signing secret is never shown), and, once a push
    was attempted, ``last_delivery`` (a zaqar-delay extension): when the last attempt was
    sent, its outcome (``delivered``, ``retry`` or ``permanent``) and why it failed."""
    shown: dict[str, Any] = {
        "id": s.id,
        "source": topics.public_name(s.queue),
        "subscriber": s.subscriber,
        "ttl": s.ttl_s,
        "age": s.age_s(now_ms),
        "options": s.options,
        "confirmed": s.confirmed,
    }
    if s.last_delivery is not None:
        shown["last_delivery"] = {
            "at": timestamp_ms(s.last_delivery.at_ms),
            "outcome": s.last_delivery.outcome,
            "detail": s.last_delivery.detail,
        }
    return shown


def queue_entry(q: QueueInfo) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": topics.public_name(q.name), "href": queue_href(q.name)}
    if q.metadata is not None:
        entry["metadata"] = q.metadata
    return entry
