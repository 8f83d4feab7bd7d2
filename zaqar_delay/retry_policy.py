"""Zaqar's ``_retry_policy``: how push deliveries to a subscriber are retried. It is set in a
subscription's options or a queue's metadata; this module checks it (Zaqar's rules and
wording) and turns it into the schedule of retries.

Zaqar's phases, after a failed first attempt: ``retries_with_no_delay`` retries at once,
``minimum_delay_retries`` retries ``minimum_delay`` seconds apart, retries ``minimum_delay``,
``minimum_delay + 5``, ... seconds apart below ``maximum_delay`` (its "linear" backoff), then
``maximum_delay_retries`` retries ``maximum_delay`` seconds apart. Zaqar slept between them in
a thread; here each retry is a due time in the store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zaqar_delay import errors

KEY = "_retry_policy"
# Zaqar's defaults (zaqar.common.consts).
DEFAULTS = {
    "retries_with_no_delay": 3,
    "minimum_delay_retries": 3,
    "minimum_delay": 5,
    "maximum_delay": 30,
    "maximum_delay_retries": 3,
}
LINEAR_INTERVAL_S = 5
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


def effective(
    subscription_options: Mapping[str, Any], queue_metadata: Mapping[str, Any]
) -> Mapping[str, Any]:
    """The policy that applies: the subscription's, unless either says
    ``ignore_subscription_override`` (then the queue's), else the queue's (Zaqar's rule)."""
    own = subscription_options.get(KEY) or {}
    queue = queue_metadata.get(KEY) or {}
    if own.get("ignore_subscription_override") or queue.get("ignore_subscription_override"):
        return queue
    return own or queue


def retry_delays_s(policy: Mapping[str, Any]) -> list[float]:
    """Seconds to wait before each retry, in order; its length is the number of retries."""
    value = {key: policy.get(key, default) for key, default in DEFAULTS.items()}
    minimum, maximum = value["minimum_delay"], value["maximum_delay"]
    return [
        *[0.0] * value["retries_with_no_delay"],
        *[float(minimum)] * value["minimum_delay_retries"],
        *map(float, range(minimum, maximum, LINEAR_INTERVAL_S)),
        *[float(maximum)] * value["maximum_delay_retries"],
    ]
