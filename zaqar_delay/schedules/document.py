"""A schedule as a client writes it and as the API shows it.

The body: the plan (``schedules/plan.py``: ``cron`` with ``timezone``, or ``every``;
``start_at``, ``end_at``, ``limit``, ``misfire``), ``message`` (``{"body", "ttl", "delay"}``,
the message each fire posts) and ``paused``. What is stored is the body as checked, with
defaults written out; ``Schedule.of_stored`` reads it back without checking it again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from zaqar_delay import errors, jsondoc, validation
from zaqar_delay.conf import Limits
from zaqar_delay.schedules import plan as plans
from zaqar_delay.schedules.plan import Plan

FIELDS = frozenset((*plans.PLAN_KEYS, "message", "paused"))
MESSAGE_FIELDS = frozenset(("body", "ttl", "delay"))


@dataclasses.dataclass(frozen=True, slots=True)
class Schedule:
    """A schedule's definition: when (``plan``), what (``message``), and whether it is
    ``paused``. ``stored`` is the checked body, as kept in the store."""

    plan: Plan
    message: Mapping[str, Any]
    paused: bool
    stored: Mapping[str, Any]

    @classmethod
    def of_stored(cls, stored: Mapping[str, Any], anchor_ms: int) -> Schedule:
        """The schedule a checked body describes (``anchor_ms``: when it was written)."""
        return cls(
            plan=plans.parse_checked(stored, anchor_ms),
            message=stored["message"],
            paused=bool(stored.get("paused", False)),
            stored=stored,
        )


def checked(document: Any, now_ms: int, limits: Limits) -> dict[str, Any]:
    """The body of a schedule written at ``now_ms``, checked: InvalidRequest (or InvalidBody)
    says what is wrong. The message's size against the queue's limit is the caller's check."""
    if not isinstance(document, dict):
        raise errors.InvalidBody("Document type not supported.")
    unknown = sorted(set(document) - FIELDS)
    if unknown:
        raise errors.InvalidRequest(f"A schedule has no field {unknown[0][:64]!r}.")
    plans.parse(document, now_ms, limits.min_schedule_interval)
    paused = document.get("paused", False)
    if not isinstance(paused, bool):
        raise errors.InvalidRequest('"paused" must be true or false.')
    stored = {key: document[key] for key in sorted(plans.PLAN_KEYS) if key in document}
    stored.setdefault("timezone", "UTC")
    stored.setdefault("misfire", "skip")
    stored["message"] = _message(document.get("message"), limits)
    stored["paused"] = paused
    return stored


def _message(message: Any, limits: Limits) -> dict[str, Any]:
    if not isinstance(message, dict) or "body" not in message:
        raise errors.InvalidRequest(
            'A schedule needs a "message" with a "body" (and optionally "ttl" and "delay").'
        )
    unknown = sorted(set(message) - MESSAGE_FIELDS)
    if unknown:
        raise errors.InvalidRequest(f"A schedule's message has no field {unknown[0][:64]!r}.")
    checked_message: dict[str, Any] = {"body": validation.message_body(message["body"])}
    if "ttl" in message:
        ttl = validation.integer_field(message, "ttl", limits.default_message_ttl)
        checked_message["ttl"] = validation.message_ttl(ttl, limits)
    if "delay" in message:
        delay = validation.integer_field(message, "delay", 0)
        checked_message["delay"] = validation.message_delay(delay, limits)
    return checked_message


def post_size(message: Mapping[str, Any]) -> int:
    """The size of a post of ``message`` alone, as the queue's limit counts it (a fire's
    post adds its dedup id and due time: ``firing.fire_post_size``)."""
    return len(jsondoc.dumps({"messages": [dict(message)]}).encode())


def merged(current: Mapping[str, Any], change: Any) -> dict[str, Any]:
    """A PATCH: ``current`` with the fields ``change`` gives (null removes an optional one).
    Giving ``cron`` drops ``every`` and the reverse, so a plan can change kind."""
    if not isinstance(change, dict):
        raise errors.InvalidBody("Document type not supported.")
    result = dict(current)
    for kind, other in (("cron", "every"), ("every", "cron")):
        if change.get(kind) is not None:
            result.pop(other, None)
    for key, value in change.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return result
