"""The pure rules of push delivery: Zaqar's retry schedule, what an answer means, which
addresses may be reached."""

from __future__ import annotations

import email.utils
import hmac
import time
from typing import Any

import pytest

from zaqar_delay import retry_policy
from zaqar_delay.push.guard import AddressGuard, DeniedAddress
from zaqar_delay.push.subscribers import redacted
from zaqar_delay.push.webhook import outcome_of, signature


def schedule(policy: dict[str, Any]) -> list[float]:
    """Every retry's delay, in order, until the policy has none left."""
    delays: list[float] = []
    while (delay := retry_policy.retry_delay_s(policy, len(delays))) is not None:
        delays.append(delay)
    return delays


def test_zaqar_s_default_schedule() -> None:
    # 3 at once, 3 after 5 s, linear 5..25 s, 3 after 30 s: 14 retries, as Zaqar makes.
    assert schedule({}) == [0, 0, 0, 5, 5, 5, 5, 10, 15, 20, 25, 30, 30, 30]
    assert retry_policy.retries({}) == 14


def test_a_policy_sets_each_phase() -> None:
    policy = {"retries_with_no_delay": 0, "minimum_delay_retries": 1, "minimum_delay": 2,
              "maximum_delay": 12, "maximum_delay_retries": 2}  # fmt: skip
    assert schedule(policy) == [2, 2, 7, 12, 12]


def test_a_stored_policy_out_of_bounds_is_read_within_them() -> None:
    # Negative counts and non-integers (kept before the bounds were checked) count as 0 or
    # the default; huge numbers cost nothing to look up.
    policy = {"retries_with_no_delay": -4, "minimum_delay_retries": "3", "maximum_delay": 10**15}
    assert schedule({**policy, "maximum_delay": 30}) == [5, 5, 5, 5, 10, 15, 20, 25, 30, 30, 30]
    assert retry_policy.retry_delay_s(policy, 10**12) == 5 + 5 * (10**12 - 3)
    assert retry_policy.retries(policy) == 3 + (10**15 - 5 + 4) // 5 + 3


def test_the_subscription_s_policy_wins_unless_told_otherwise() -> None:
    own = {"_retry_policy": {"minimum_delay": 1}}
    queue = {"_retry_policy": {"minimum_delay": 9}}
    assert retry_policy.effective(own, queue) == {"minimum_delay": 1}
    assert retry_policy.effective({}, queue) == {"minimum_delay": 9}
    ignoring = {"_retry_policy": {"minimum_delay": 9, "ignore_subscription_override": True}}
    assert retry_policy.effective(own, ignoring)["minimum_delay"] == 9


@pytest.mark.parametrize(
    ("status", "kind"),
    [(200, "delivered"), (204, "delivered"), (429, "retry"), (500, "retry"), (503, "retry"),
     (301, "permanent"), (400, "permanent"), (404, "permanent"), (410, "permanent")],
)  # fmt: skip
def test_what_an_answer_means(status: int, kind: str) -> None:
    assert outcome_of(status, None).kind == kind


def test_retry_after_in_seconds_or_as_a_date() -> None:
    assert outcome_of(503, "7").retry_after_s == 7
    later = email.utils.formatdate(time.time() + 60, usegmt=True)
    assert 55 < outcome_of(429, later).retry_after_s <= 60
    assert outcome_of(503, "soon").retry_after_s == 0
    # A receiver cannot push a retry past a day (nor past what the store keeps).
    assert outcome_of(503, "99999999999999").retry_after_s == 86_400
    assert outcome_of(503, "Fri, 31 Dec 9999 23:59:59 GMT").retry_after_s == 86_400


def test_signature_is_hmac_sha256_over_timestamp_delivery_id_and_body() -> None:
    assert signature("k", 1000, "d1", b"{}") == (
        "t=1000,v2=" + hmac.new(b"k", b"1000.d1.{}", "sha256").hexdigest()
    )


@pytest.mark.parametrize(
    ("subscriber", "shown"),
    [
        ("https://h.example/in", "https://h.example/in"),
        ("https://u:pw@h.example/in", "https://u:***@h.example/in"),
        ("https://h.example/in?code=k&sig=s&flag", "https://h.example/in?code=***&sig=***&flag"),
        ("trust+https://h.example/?token=t", "trust+https://h.example/?token=***"),
        ("https://h.example/in?", "https://h.example/in?"),
        ("mailto:ops@example.com?subject=due", "mailto:ops@example.com?subject=due"),
        ("http://[::1/", "<a malformed subscriber>"),
    ],
)
def test_a_subscriber_is_shown_without_password_or_query_values(
    subscriber: str, shown: str
) -> None:
    assert redacted(subscriber) == shown


def test_guard_defaults_deny_link_local_and_metadata_only() -> None:
    guard = AddressGuard()
    assert guard.permits("127.0.0.1") and guard.permits("10.1.2.3") and guard.permits("::1")
    assert not guard.permits("169.254.169.254") and not guard.permits("fe80::1%eth0")
    with pytest.raises(DeniedAddress):
        guard.check_host("169.254.169.254")
    guard.check_host("no-such-host.invalid")  # unresolvable now: checked again at connect
    assert AddressGuard(allow=["169.254.169.254/32"]).permits("169.254.169.254")
