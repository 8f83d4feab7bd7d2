"""The queue policy is read in one place (zaqar_delay.policy); the Redis scripts, which read
the metadata themselves, use the same key names (the backoff formula is checked on every store
by the contract suite's TestRetryBackoff), as they do for subscriptions' dispatch limits
(zaqar_delay.dispatch_limits)."""

from __future__ import annotations

from pathlib import Path

import pytest

from zaqar_delay import policy
from zaqar_delay.policy import QueuePolicy, RetryBackoff

LUA = Path(policy.__file__).parent / "storage" / "redis" / "lua"


def test_unset_null_and_zero_mean_the_default() -> None:
    assert QueuePolicy.of({}) == QueuePolicy()
    nulls = {key: None for key in policy.KEYS}
    assert QueuePolicy.of(nulls) == QueuePolicy()
    assert QueuePolicy.of({policy.DEFAULT_MESSAGE_TTL: 0, policy.MAX_CLAIM_COUNT: 0}) == (
        QueuePolicy()
    )


def test_every_key_is_read() -> None:
    read = QueuePolicy.of(
        {
            "_max_messages_post_size": 1000,
            "_default_message_ttl": 120,
            "_default_message_delay": 30,
            "_dead_letter_queue": "dlq",
            "_dead_letter_queue_messages_ttl": 600,
            "_max_claim_count": 3,
            "_enable_encrypt_messages": True,
            "_retry_backoff": {"initial": 2, "factor": 3, "max": 10},
            "other": "ignored",
        }
    )
    assert read == QueuePolicy(1000, 120, 30, "dlq", 600, 3, True, RetryBackoff(2.0, 3.0, 10.0))
    assert read.dead_letters


@pytest.mark.parametrize("metadata", [{"_max_claim_count": 3}, {"_dead_letter_queue": "dlq"}, {}])
def test_dead_lettering_needs_both_keys(metadata: dict[str, object]) -> None:
    assert not QueuePolicy.of(metadata).dead_letters


def test_backoff_grows_by_the_factor_up_to_the_maximum() -> None:
    backoff = RetryBackoff(2.0, 3.0, 10.0)
    assert [backoff.delay_s(count) for count in range(0, 5)] == [2.0, 2.0, 6.0, 10.0, 10.0]
