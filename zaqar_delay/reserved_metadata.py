"""The rules of reserved queue metadata (``_default_message_delay``, ``_max_claim_count``,
``_dead_letter_queue``, ``_retry_backoff``, ``_flavor``...) in the v2 API, with Zaqar's
wording: pure functions of the metadata and :class:`~zaqar_delay.conf.Limits`, raising
:class:`~zaqar_delay.errors.InvalidRequest` or :class:`~zaqar_delay.errors.InvalidBody`.
"""

from __future__ import annotations

from typing import Any

from zaqar_delay import errors, jsondoc, policy, retry_policy, topics
from zaqar_delay.conf import Limits
from zaqar_delay.models import Metadata
from zaqar_delay.validation import INT64_MAX, MIN_MESSAGE_TTL, is_int, is_queue_name


def _reserved_int(metadata: Metadata, key: str, low: int, high: int, range_error: str) -> None:
    value = metadata.get(key)
    if value is None:
        return
    if not is_int(value):
        raise errors.InvalidRequest(f"{key} must be integer.")
    if not low <= value <= high:
        raise errors.InvalidRequest(range_error)


def _retry_backoff(policy: Any, limits: Limits) -> None:
    """``{"initial": s, "factor": f, "max": s}``: seconds, 0 < initial <= max <=
    max_message_delay, factor >= 1 (numbers, fractions allowed)."""
    if policy is None:
        return
    shape = "_retry_backoff must be an object with the numbers initial, factor and max."
    if not isinstance(policy, dict) or set(policy) != {"initial", "factor", "max"}:
        raise errors.InvalidRequest(shape)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in policy.values()):
        raise errors.InvalidRequest(shape)
    initial, factor, maximum = policy["initial"], policy["factor"], policy["max"]
    if not 0 < initial <= maximum <= limits.max_message_delay:
        raise errors.InvalidRequest(
            f"_retry_backoff needs 0 < initial <= max <= {limits.max_message_delay} seconds."
        )
    if not 1 <= factor <= 1000:
        raise errors.InvalidRequest("_retry_backoff factor must be at least 1 and at most 1000.")


def _kept_flavor(metadata: Metadata, before: Metadata | None) -> None:
    """A patch (``before``: the metadata it changes) leaves ``_flavor`` as it was: a queue is
    placed once, by the flavor it is created with, and never moves, so another would lie."""
    if before is None:
        return
    if (metadata.get(policy.FLAVOR) or None) != (before.get(policy.FLAVOR) or None):
        raise errors.InvalidRequest(
            "_flavor is chosen when a queue is created and cannot change: a queue never moves "
            "to another pool."
        )


def checked(
    metadata: Metadata, limits: Limits, queue: str, before: Metadata | None = None
) -> Metadata:
    """Check the reserved ``_`` keys of ``queue``'s metadata; null means "use the default".
    ``before``: for a patch, the metadata it changes."""
    _reserved_int(
        metadata,
        policy.DEFAULT_MESSAGE_TTL,
        MIN_MESSAGE_TTL,
        limits.max_message_ttl,
        f"_default_message_ttl can not exceed {limits.max_message_ttl} seconds, and must be at "
        f"least {MIN_MESSAGE_TTL} seconds long.",
    )
    _reserved_int(
        metadata,
        policy.MAX_MESSAGES_POST_SIZE,
        1,
        limits.max_messages_post_size,
        f"_max_messages_post_size can not exceed {limits.max_messages_post_size},  and must be "
        "at least greater than 0.",
    )
    _reserved_int(
        metadata,
        policy.DEFAULT_MESSAGE_DELAY,
        0,
        limits.max_message_delay,
        f"The TTL can not exceed {limits.max_message_delay} seconds, and must be at least 0 "
        "seconds long.",
    )
    _reserved_int(
        metadata,
        policy.MAX_CLAIM_COUNT,
        0,
        INT64_MAX,
        "_max_claim_count must be at least 0.",
    )
    _reserved_int(
        metadata,
        policy.DEAD_LETTER_QUEUE_MESSAGES_TTL,
        MIN_MESSAGE_TTL,
        limits.max_message_ttl,
        f"The TTL for a message may not exceed {limits.max_message_ttl} seconds, and must be at "
        f"least {MIN_MESSAGE_TTL} seconds long.",
    )
    _retry_backoff(metadata.get(policy.RETRY_BACKOFF), limits)
    retry_policy.check(metadata, limits.max_message_ttl)
    dead_letter = metadata.get(policy.DEAD_LETTER_QUEUE)
    if dead_letter is not None and not is_queue_name(dead_letter):
        raise errors.InvalidRequest("_dead_letter_queue must be the name of a queue.")
    if dead_letter == queue:
        # Moving a message to its own queue would delete it; a failed push's dead letter
        # would be pushed, fail and be dead-lettered again without end.
        raise errors.InvalidRequest("_dead_letter_queue must name another queue.")
    for flag in (policy.ENABLE_ENCRYPT_MESSAGES, policy.DELETE_AFTER_PUSH):
        value = metadata.get(flag)
        if value is not None and not isinstance(value, bool):
            raise errors.InvalidRequest(f"{flag} must be boolean.")
    _kept_flavor(metadata, before)
    return metadata


def flavor(metadata: Metadata) -> str | None:
    """The ``_flavor`` a new queue asks for (with pooling: the pools it may be placed on)."""
    value = metadata.get(policy.FLAVOR)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not jsondoc.is_unicode(value):
        raise errors.InvalidRequest("_flavor must be the name of a flavor.")
    return value


def with_reserved_defaults(metadata: Metadata, limits: Limits, queue: str = "") -> Metadata:
    """Metadata as GET shows it: every reserved key present, falsy ones filled with defaults.
    A topic's (``queue`` a topic's stored name) shows, as Zaqar's, the defaults of the three
    keys that shape its messages; the others only when set."""
    defaults: Metadata = {
        policy.MAX_MESSAGES_POST_SIZE: limits.max_messages_post_size,
        policy.DEFAULT_MESSAGE_TTL: limits.default_message_ttl,
        policy.DEFAULT_MESSAGE_DELAY: limits.default_message_delay,
        policy.DEAD_LETTER_QUEUE: None,
        policy.DEAD_LETTER_QUEUE_MESSAGES_TTL: None,
        policy.MAX_CLAIM_COUNT: None,
        policy.ENABLE_ENCRYPT_MESSAGES: False,
    }
    shown = dict(metadata)
    keys = policy.MESSAGE_KEYS if topics.is_topic(queue) else policy.ZAQAR_KEYS
    for key in keys:
        if not shown.get(key):
            shown[key] = defaults[key]
    return shown
