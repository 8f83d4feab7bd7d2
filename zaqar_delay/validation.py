"""The rules of the v2 API: identifiers, numeric limits and message fields (reserved queue
metadata: ``reserved_metadata``).

Pure functions of their input and :class:`~zaqar_delay.conf.Limits`; each raises
:class:`~zaqar_delay.errors.InvalidRequest` (a rule is broken) or
:class:`~zaqar_delay.errors.InvalidBody` (a field has the wrong type) with Zaqar's wording.
Shared by the API and the bulk pipeline so both accept exactly the same input.
"""

from __future__ import annotations

import datetime
import re
import uuid
from collections.abc import Mapping
from typing import Any

from zaqar_delay import errors, jsondoc
from zaqar_delay.conf import Limits
from zaqar_delay.encryption import FIELD as SEALED_FIELD
from zaqar_delay.encryption import has_sealed_form
from zaqar_delay.models import NewMessage

QUEUE_NAME_RE = re.compile(r"^[a-zA-Z0-9_\-.]+$")
# Zaqar's rule allows dots, but these two are path steps a browser or proxy resolves away
# (``/v2/queues/./stats`` becomes ``/v2/stats``): no request could name such a queue.
DOT_SEGMENTS = frozenset({".", ".."})
QUEUE_NAME_MAX = 64
PROJECT_ID_MAX = 256
DEDUP_ID_MAX = 256
MIN_MESSAGE_TTL = 60
MIN_CLAIM_TTL = 60
MIN_CLAIM_GRACE = 60
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def is_int(value: Any) -> bool:
    """JSON integers only: booleans are not numbers here."""
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int64(value: int) -> None:
    if not INT64_MIN <= value <= INT64_MAX:
        raise errors.InvalidBody("JSON contains integer that is too large.")


# -- identifiers -------------------------------------------------------------------------------


def is_queue_name(name: Any) -> bool:
    """Zaqar's rule (1 to 64 letters, digits, ``_``, ``-`` and ``.``), but for the dot
    segments ``.`` and ``..``."""
    return (
        isinstance(name, str)
        and len(name) <= QUEUE_NAME_MAX
        and QUEUE_NAME_RE.match(name) is not None
        and name not in DOT_SEGMENTS
    )


def queue_name(name: str) -> str:
    if not is_queue_name(name):
        raise errors.InvalidRequest(
            "The format of the submitted queue name or project id is not valid."
        )
    return name


def project_id(project: str) -> str:
    if len(project) > PROJECT_ID_MAX:
        raise errors.InvalidRequest(
            "The format of the submitted queue name or project id is not valid."
        )
    return project


def client_id(value: str, limits: Limits) -> str:
    """The canonical Client-ID: a UUID's 32 hex digits in strict mode, else the value itself."""
    if limits.client_id_uuid_safe == "strict":
        try:
            return uuid.UUID(value).hex
        except ValueError as exc:
            raise errors.InvalidRequest("Malformed hexadecimal UUID.") from exc
    if not limits.min_length_client_id <= len(value) <= limits.max_length_client_id:
        raise errors.InvalidRequest(
            f"Length of client id must be at least {limits.min_length_client_id} and no greater "
            f"than {limits.max_length_client_id}."
        )
    return value


# -- numeric limits ----------------------------------------------------------------------------


def message_limit(limit: int, limits: Limits) -> int:
    if not 1 <= limit <= limits.max_messages_per_page:
        raise errors.InvalidRequest(
            f"Limit must be at least 1 and may not be greater than {limits.max_messages_per_page}."
        )
    return limit


def queue_limit(limit: int, limits: Limits) -> int:
    if not 1 <= limit <= limits.max_queues_per_page:
        raise errors.InvalidRequest(
            f"Limit must be at least 1 and no greater than {limits.max_queues_per_page}."
        )
    return limit


def claim_limit(limit: int, limits: Limits) -> int:
    if not 1 <= limit <= limits.max_messages_per_claim_or_pop:
        raise errors.InvalidRequest(
            "Limit must be at least 1 and may not be greater than "
            f"{limits.max_messages_per_claim_or_pop}."
        )
    return limit


def pop_count(count: int, limits: Limits) -> int:
    if not 1 <= count <= limits.max_messages_per_claim_or_pop:
        raise errors.InvalidRequest(
            "Pop value must be at least 1 and may not be greater than "
            f"{limits.max_messages_per_claim_or_pop}."
        )
    return count


def id_list(ids: list[str], limits: Limits) -> list[str]:
    if not 1 <= len(ids) <= limits.max_messages_per_page:
        raise errors.InvalidRequest(
            "ids parameter should have at least 1 and not greater than "
            f"{limits.max_messages_per_page} values."
        )
    return ids


def integer_field(document: Mapping[str, Any], name: str, default: int) -> int:
    """``document[name]`` as an int (``default`` when absent); null and non-ints are refused."""
    if name not in document:
        return default
    value = document[name]
    if not is_int(value):
        raise errors.InvalidBody(f'The value of the "{name}" field must be a int.')
    _check_int64(value)
    return int(value)


def message_ttl(ttl: int, limits: Limits) -> int:
    if not MIN_MESSAGE_TTL <= ttl <= limits.max_message_ttl:
        raise errors.InvalidRequest(
            f"The TTL for a message may not exceed {limits.max_message_ttl} seconds, and must "
            f"be at least {MIN_MESSAGE_TTL} seconds long."
        )
    return ttl


def message_delay(delay: int, limits: Limits) -> int:
    if not 0 <= delay <= limits.max_message_delay:
        raise errors.InvalidRequest(
            f"The Delay TTL for a message may not exceed {limits.max_message_delay} seconds,"
            "and must be at least 0 seconds long."
        )
    return delay


def epoch_ms_of(value: Any, what: str) -> int:
    """The epoch milliseconds of an RFC 3339 time with an offset; InvalidRequest, saying
    ``what`` is not one, otherwise."""
    moment = None
    if isinstance(value, str):
        try:
            moment = datetime.datetime.fromisoformat(value)
        except ValueError:
            moment = None
    if moment is None or moment.tzinfo is None:
        raise errors.InvalidRequest(
            f"{what} not an RFC 3339 time with an offset, such as 2030-01-01T10:00:00.000Z."
        )
    return (moment - EPOCH) // datetime.timedelta(milliseconds=1)


def deliver_at(value: Any, now_ms: int, limits: Limits) -> int:
    """Milliseconds from ``now_ms`` until ``value`` (RFC 3339 with an offset, or epoch ms).

    A time up to ``deliver_at_tolerance`` seconds in the past means "now"; further in the past,
    or more than ``max_message_delay`` seconds ahead, is refused.
    """
    if is_int(value):
        _check_int64(value)
        due_ms = int(value)
    elif isinstance(value, str):
        due_ms = epoch_ms_of(value, f"deliver_at {value!r} is")
    else:
        raise errors.InvalidBody(
            'The value of the "deliver_at" field must be an RFC 3339 time or epoch milliseconds.'
        )
    offset_ms = due_ms - now_ms
    if offset_ms < -limits.deliver_at_tolerance * 1000:
        raise errors.InvalidRequest(
            f"deliver_at is {-offset_ms / 1000:.3f} seconds in the past; at most "
            f"{limits.deliver_at_tolerance:g} seconds are tolerated."
        )
    if offset_ms > limits.max_message_delay * 1000:
        raise errors.InvalidRequest(
            f"deliver_at may not be more than {limits.max_message_delay} seconds from now."
        )
    return max(0, offset_ms)


def delay_ms(delay_s: int, round_up: int) -> int:
    """A relative delay in milliseconds from a floored ``now_ms``: ``round_up``
    (:func:`~zaqar_delay.clock.arrival`) keeps a nonzero delay from ending before the
    request's arrival plus ``delay_s``. A zero delay needs none: nothing is seen before it
    is posted."""
    return delay_s * 1000 + round_up if delay_s else 0


def due_offset(document: Mapping[str, Any], now_ms: int, limits: Limits, round_up: int = 0) -> int:
    """Milliseconds until due from exactly one of ``delay`` (seconds) or ``deliver_at``.

    A ``deliver_at`` is exact to the millisecond; a ``delay`` counts from arrival, with
    ``round_up`` as in :func:`delay_ms`.
    """
    if "delay" in document and "deliver_at" in document:
        raise errors.InvalidRequest("Give either delay or deliver_at, not both.")
    if "deliver_at" in document:
        return deliver_at(document["deliver_at"], now_ms, limits)
    if "delay" in document:
        return delay_ms(message_delay(integer_field(document, "delay", 0), limits), round_up)
    raise errors.InvalidRequest("Give delay (seconds) or deliver_at (a time).")


def dedup_id(document: Mapping[str, Any]) -> str:
    """The message's optional ``dedup_id`` (an extension): 1 to 256 characters, "" if absent."""
    if "dedup_id" not in document:
        return ""
    value = document["dedup_id"]
    if not isinstance(value, str):
        raise errors.InvalidBody('The value of the "dedup_id" field must be a string.')
    if not 1 <= len(value) <= DEDUP_ID_MAX:
        raise errors.InvalidRequest(
            f"A dedup_id must be at least 1 and at most {DEDUP_ID_MAX} characters long."
        )
    if not jsondoc.is_unicode(value):
        raise errors.InvalidRequest("A dedup_id must be Unicode text: no lone surrogate.")
    return value


def new_message(
    raw: Any,
    default_ttl: int,
    queue_delay: int,
    now_ms: int,
    limits: Limits,
    round_up: int = 0,
) -> NewMessage:
    """One message of a post (``{"body", "ttl", "delay", "deliver_at", "dedup_id"}``) as it
    will be stored at ``now_ms``, on a queue with these defaults (``queue_delay`` 0: a queue
    without ``_default_message_delay``); ``round_up`` as in :func:`delay_ms`."""
    if not isinstance(raw, dict):
        raise errors.InvalidBody("Document type not supported.")
    ttl = message_ttl(integer_field(raw, "ttl", default_ttl), limits)
    if "body" not in raw:
        raise errors.InvalidBody('Missing "body" field.')
    offset_ms = 0
    if "deliver_at" in raw:
        # An extension: honoured on every queue, since the caller asked for that time.
        offset_ms = due_offset(raw, now_ms, limits)
    elif queue_delay:
        # Zaqar's rule: delay counts only on a delayed queue and is ignored elsewhere.
        delay_s = message_delay(integer_field(raw, "delay", queue_delay), limits)
        offset_ms = delay_ms(delay_s, round_up)
    return NewMessage(jsondoc.dumps(message_body(raw["body"])), ttl, offset_ms, dedup_id(raw))


def message_body(body: Any) -> Any:
    """A posted or edited body: anything but the form the service seals bodies in, which is
    refused so that no client can have a sealed body of its choosing opened."""
    if has_sealed_form(body):
        raise errors.InvalidRequest(
            f'A message body may not be a lone "{SEALED_FIELD}" field: that form is reserved '
            "for the bodies of encrypted queues."
        )
    return body


# What an edit of one message may name.
EDITABLE = ("body", "delay", "deliver_at", "ttl")


def message_edit(document: Any) -> dict[str, Any]:
    """A PATCH of one message: an object naming some of ``body``, ``ttl`` and one of
    ``delay`` or ``deliver_at`` (their values are checked by the caller, which knows the time
    and the queue), and nothing else, so a misspelt field is refused rather than ignored."""
    if not isinstance(document, dict):
        raise errors.InvalidBody("Document type not supported.")
    fields: dict[str, Any] = document
    unknown = sorted(set(fields) - set(EDITABLE))
    if unknown:
        raise errors.InvalidRequest(
            f"A message edit takes {', '.join(EDITABLE)}; not {', '.join(unknown)}."
        )
    if not fields:
        raise errors.InvalidRequest(
            "Give body, ttl, or a new due time (delay in seconds, or deliver_at)."
        )
    return fields


def claim_wait(wait_s: float, limits: Limits) -> float:
    if not 0 <= wait_s <= limits.max_claim_wait:
        raise errors.InvalidRequest(
            f"The wait for a claim may not exceed {limits.max_claim_wait} seconds, and must be "
            "at least 0 seconds long."
        )
    return wait_s


def claim_ttl(ttl: int, limits: Limits) -> int:
    if not MIN_CLAIM_TTL <= ttl <= limits.max_claim_ttl:
        raise errors.InvalidRequest(
            f"The TTL for a claim may not exceed {limits.max_claim_ttl} seconds, and must be "
            f"at least {MIN_CLAIM_TTL} seconds long."
        )
    return ttl


def claim_grace(grace: int, limits: Limits) -> int:
    if not MIN_CLAIM_GRACE <= grace <= limits.max_claim_grace:
        raise errors.InvalidRequest(
            f"The grace for a claim may not exceed {limits.max_claim_grace} seconds, and must "
            f"be at least {MIN_CLAIM_GRACE} seconds long."
        )
    return grace
