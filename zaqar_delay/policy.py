"""A queue's policy: what the reserved keys of its metadata mean, read in one place.

Validation checks these keys (``reserved_metadata.checked``); the poster, the service and
the MongoDB driver read them through :class:`QueuePolicy`. The Redis scripts read the same
keys from the stored metadata inside the script (a claim stays one round trip);
``tests/unit/test_policy.py`` fails when the names they use or their backoff formula drift
from this module.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from zaqar_delay.models import Metadata

MAX_MESSAGES_POST_SIZE = "_max_messages_post_size"
DEFAULT_MESSAGE_TTL = "_default_message_ttl"
DEFAULT_MESSAGE_DELAY = "_default_message_delay"
DEAD_LETTER_QUEUE = "_dead_letter_queue"
DEAD_LETTER_QUEUE_MESSAGES_TTL = "_dead_letter_queue_messages_ttl"
MAX_CLAIM_COUNT = "_max_claim_count"
ENABLE_ENCRYPT_MESSAGES = "_enable_encrypt_messages"
RETRY_BACKOFF = "_retry_backoff"
DELETE_AFTER_PUSH = "_delete_after_push"
# With pooling: the flavor (set of pools) a new queue is placed within.
FLAVOR = "_flavor"

# Zaqar's reserved keys, which GET shows with their defaults; then zaqar-delay's own.
ZAQAR_KEYS = (
    MAX_MESSAGES_POST_SIZE,
    DEFAULT_MESSAGE_TTL,
    DEFAULT_MESSAGE_DELAY,
    DEAD_LETTER_QUEUE,
    DEAD_LETTER_QUEUE_MESSAGES_TTL,
    MAX_CLAIM_COUNT,
    ENABLE_ENCRYPT_MESSAGES,
)
KEYS = (*ZAQAR_KEYS, RETRY_BACKOFF, DELETE_AFTER_PUSH)
# The keys that shape a message as it is posted: all a topic shows unset, as in Zaqar.
MESSAGE_KEYS = (MAX_MESSAGES_POST_SIZE, DEFAULT_MESSAGE_TTL, DEFAULT_MESSAGE_DELAY)


@dataclasses.dataclass(frozen=True, slots=True)
class RetryBackoff:
    """Redelivery after a released or expired claim, delayed exponentially (seconds)."""

    initial_s: float
    factor: float
    max_s: float

    def delay_s(self, claim_count: int) -> float:
        """How long after the claim ends a message claimed ``claim_count`` times is due."""
        return min(self.max_s, self.initial_s * self.factor ** max(claim_count - 1, 0))


def _positive_int(value: Any) -> int | None:
    """A set integer option: null, 0 and anything else mean "not set" (Zaqar's reading)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value else None


@dataclasses.dataclass(frozen=True, slots=True)
class QueuePolicy:
    """The reserved keys of checked metadata; ``None`` is "not set" (the server's default)."""

    max_messages_post_size: int | None = None
    default_message_ttl: int | None = None
    default_message_delay: int = 0
    dead_letter_queue: str | None = None
    dead_letter_ttl_s: int | None = None
    max_claim_count: int | None = None
    encrypt_messages: bool = False
    retry_backoff: RetryBackoff | None = None
    # A message is deleted once every subscription it is owed to has it (push-only queues).
    delete_after_push: bool = False

    @classmethod
    def of(cls, metadata: Metadata) -> QueuePolicy:
        """The policy of metadata that passed ``reserved_metadata.checked``."""
        backoff = metadata.get(RETRY_BACKOFF)
        target = metadata.get(DEAD_LETTER_QUEUE)
        return cls(
            max_messages_post_size=_positive_int(metadata.get(MAX_MESSAGES_POST_SIZE)),
            default_message_ttl=_positive_int(metadata.get(DEFAULT_MESSAGE_TTL)),
            default_message_delay=_positive_int(metadata.get(DEFAULT_MESSAGE_DELAY)) or 0,
            dead_letter_queue=target if isinstance(target, str) and target else None,
            dead_letter_ttl_s=_positive_int(metadata.get(DEAD_LETTER_QUEUE_MESSAGES_TTL)),
            max_claim_count=_positive_int(metadata.get(MAX_CLAIM_COUNT)),
            encrypt_messages=metadata.get(ENABLE_ENCRYPT_MESSAGES) is True,
            retry_backoff=(
                RetryBackoff(
                    float(backoff["initial"]), float(backoff["factor"]), float(backoff["max"])
                )
                if isinstance(backoff, dict)
                else None
            ),
            delete_after_push=metadata.get(DELETE_AFTER_PUSH) is True,
        )

    @property
    def dead_letters(self) -> bool:
        """Whether messages claimed ``max_claim_count`` times move to ``dead_letter_queue``
        (both must be set, as in Zaqar)."""
        return self.max_claim_count is not None and self.dead_letter_queue is not None

    def most_post_bytes(self, configured: int) -> int:
        """The largest post the queue takes: its ``_max_messages_post_size``, at most the
        server's ``configured`` one."""
        return min(configured, self.max_messages_post_size or configured)

    def message_ttl(self, configured: int) -> int:
        """The ttl of a message posted without one: the queue's default, else the server's
        ``configured`` one."""
        return self.default_message_ttl or configured

    def claimed_too_often(self, claim_count: int) -> bool:
        """Whether a message a claim just took, its count raised to ``claim_count`` by that
        claim, goes to the dead-letter queue instead: it had already been claimed
        ``max_claim_count`` times. The decision of every store (Redis's claim.lua makes it
        before raising the count: ``count >= max``)."""
        return self.dead_letters and claim_count > (self.max_claim_count or 0)
