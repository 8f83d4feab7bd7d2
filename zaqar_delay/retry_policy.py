"""Zaqar's ``_retry_policy``: how push deliveries to a subscriber are retried. It is set in a
subscription's options or a queue's metadata; this module checks it (Zaqar's rules and
wording)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zaqar_delay import errors

KEY = "_retry_policy"
# Integers, but for retry_backoff_function (a string) and ignore_subscription_override.
INTEGER_KEYS = (
    "retries_with_no_delay",
    "minimum_delay_retries",
    "minimum_delay",
    "maximum_delay",
    "maximum_delay_retries",
)


def check(holder: Mapping[str, Any] | None) -> None:
    """Check ``holder["_retry_policy"]`` when present; InvalidRequest otherwise."""
    policy = holder.get(KEY) if holder else None
    if not policy:
        return
    if not isinstance(policy, dict):
        raise errors.InvalidRequest("retry_policy must be a dict.")
    for key in INTEGER_KEYS:
        value = policy.get(key)
        if value and not (isinstance(value, int) and not isinstance(value, bool)):
            raise errors.InvalidRequest(f"Retry policy: {key} must be a integer.")
    function = policy.get("retry_backoff_function")
    if function and not isinstance(function, str):
        raise errors.InvalidRequest("retry_backoff_function must be a string.")
    if function and function != "linear":
        raise errors.InvalidRequest("retry_backoff_function only supports linear now.")
    ignore = policy.get("ignore_subscription_override")
    if ignore and not isinstance(ignore, bool):
        raise errors.InvalidRequest("ignore_subscription_override must be a boolean.")
