"""Zaqar's ``_retry_policy``: how push deliveries to a subscriber are retried. It is set in a
subscription's options or a queue's metadata; this module checks it (Zaqar's rules and
wording) and turns it into the schedule of retries.

Zaqar's phases, after a failed first attempt: ``retries_with_no_delay`` retries at once,
``minimum_delay_retries`` retries ``minimum_delay`` seconds apart, retries ``minimum_delay``,
``minimum_delay + 5``, ... seconds apart below ``maximum_delay`` (its "linear" backoff), then
``maximum_delay_retries`` retries ``maximum_delay`` seconds apart. Zaqar slept between them in
a thread; here each retry is a due time in the store, and the wait before each is computed
from its number alone.
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
DELAY_KEYS = ("minimum_delay", "maximum_delay")
# Zaqar sets no upper bound; without one a policy could ask for billions of retries.
MAX_RETRIES = 100
# Integers, but for retry_backoff_function (a string) and ignore_subscription_override.
INTEGER_KEYS = (
    "retries_with_no_delay",
    "minimum_delay_retries",
    "minimum_delay",
    "maximum_delay",
    "maximum_delay_retries",
)


def check(holder: Mapping[str, Any] | None, max_delay_s: int) -> None:
    """Check ``holder["_retry_policy"]`` when present (Zaqar's types and wording, and the
    bounds: counts from 0 to ``MAX_RETRIES``, delays from 0 to ``max_delay_s``, the longest a
    message lives); InvalidRequest otherwise."""
    policy = holder.get(KEY) if holder else None
    if not policy:
        return
    if not isinstance(policy, dict):
        raise errors.InvalidRequest("retry_policy must be a dict.")
    for key in INTEGER_KEYS:
        value = policy.get(key)
        if value and not (isinstance(value, int) and not isinstance(value, bool)):
            raise errors.InvalidRequest(f"Retry policy: {key} must be a integer.")
        high = max_delay_s if key in DELAY_KEYS else MAX_RETRIES
        if value and not 0 <= value <= high:
            raise errors.InvalidRequest(
                f"Retry policy: {key} must be at least 0 and at most {high}"
                + (" seconds, the longest a message lives." if key in DELAY_KEYS else ".")
            )
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


def _value(policy: Mapping[str, Any], key: str) -> int:
    """A field of a stored policy, its default when unset or not an integer, at least 0 (a
    policy stored before the bounds were checked is read within them too)."""
    value = policy.get(key, DEFAULTS[key])
    if not isinstance(value, int) or isinstance(value, bool):
        value = DEFAULTS[key]
    return max(0, value)


def retry_delay_s(policy: Mapping[str, Any], retry: int) -> float | None:
    """Seconds to wait before retry number ``retry`` (0: the first, after the first attempt
    failed), or None when the policy has no such retry. Constant time and memory, whatever the
    policy's numbers."""
    for count, first_s, step_s in _phases(policy):
        if retry < count:
            return float(first_s + step_s * retry)
        retry -= count
    return None


def _phases(policy: Mapping[str, Any]) -> list[tuple[int, int, int]]:
    """Zaqar's phases as (retries, first delay, growth per retry): at once, ``minimum_delay``,
    linear from ``minimum_delay`` below ``maximum_delay``, then ``maximum_delay``."""
    minimum, maximum = _value(policy, "minimum_delay"), _value(policy, "maximum_delay")
    return [
        (_value(policy, "retries_with_no_delay"), 0, 0),
        (_value(policy, "minimum_delay_retries"), minimum, 0),
        (len(range(minimum, maximum, LINEAR_INTERVAL_S)), minimum, LINEAR_INTERVAL_S),
        (_value(policy, "maximum_delay_retries"), maximum, 0),
    ]


def retries(policy: Mapping[str, Any]) -> int:
    """How many retries the policy allows after a failed first attempt."""
    return sum(count for count, _, _ in _phases(policy))
