"""The pure rules of push delivery: Zaqar's retry schedule, what an answer means, which
addresses may be reached."""

from __future__ import annotations

import email.utils
import hmac
import time

import pytest

from zaqar_delay import retry_policy
from zaqar_delay.push.guard import AddressGuard, DeniedAddress
from zaqar_delay.push.webhook import outcome_of, signature


def test_zaqar_s_default_schedule() -> None:
    # 3 at once, 3 after 5 s, linear 5..25 s, 3 after 30 s: 14 retries, as Zaqar makes.
    assert retry_policy.retry_delays_s({}) == [0, 0, 0, 5, 5, 5, 5, 10, 15, 20, 25, 30, 30, 30]


def test_a_policy_sets_each_phase() -> None:
    policy = {"retries_with_no_delay": 0, "minimum_delay_retries": 1, "minimum_delay": 2,
              "maximum_delay": 12, "maximum_delay_retries": 2}  # fmt: skip
    assert retry_policy.retry_delays_s(policy) == [2, 2, 7, 12, 12]


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


def test_signature_is_hmac_sha256_over_timestamp_and_body() -> None:
    assert signature("k", 1000, b"{}") == (
        "t=1000,v1=" + hmac.new(b"k", b"1000.{}", "sha256").hexdigest()
    )


def test_guard_defaults_deny_link_local_and_metadata_only() -> None:
    guard = AddressGuard()
    assert guard.permits("127.0.0.1") and guard.permits("10.1.2.3") and guard.permits("::1")
    assert not guard.permits("169.254.169.254") and not guard.permits("fe80::1%eth0")
    with pytest.raises(DeniedAddress):
        guard.check_host("169.254.169.254")
    guard.check_host("no-such-host.invalid")  # unresolvable now: checked again at connect
    assert AddressGuard(allow=["169.254.169.254/32"]).permits("169.254.169.254")
