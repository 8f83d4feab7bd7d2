"""Claims on Redis: one script call to claim, renew, release or read one."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from zaqar_delay import errors
from zaqar_delay.models import (
    Claim,
    ClaimOutcome,
    ClaimTimes,
    OverLimit,
)
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.redis.errors import translate_class_errors
from zaqar_delay.storage.redis.replies import messages_of


@translate_class_errors
class ClaimScripts(Driver):
    """The claim operations of :class:`~zaqar_delay.storage.redis.driver.RedisDriver`."""

    if TYPE_CHECKING:

        def _run(self, name: str, project: str, queue: str, *args: Any) -> Any: ...

    def claim(
        self, project: str, queue: str, times: ClaimTimes, limit: int, now_ms: int
    ) -> ClaimOutcome:
        claim_id = secrets.token_hex(16)
        claimed, dead, dead_letter_queue, dead_letter_ttl = self._run(
            "claim", project, queue, now_ms, claim_id, times.ttl_s, times.grace_s, limit
        )
        over_limit = None
        if dead:
            over_limit = OverLimit(
                dead_letter_queue.decode(),
                int(dead_letter_ttl) or None,
                tuple(messages_of(dead, now_ms)),
            )
        claim = None
        if claimed:
            expires_ms = now_ms + times.ttl_s * 1000
            messages = tuple(messages_of(claimed, now_ms))
            claim = Claim(claim_id, times.ttl_s, times.grace_s, now_ms, expires_ms, messages)
        return ClaimOutcome(claim, over_limit)

    def next_claimable_ms(self, project: str, queue: str, now_ms: int) -> int | None:
        return int(self._run("next_claimable", project, queue, now_ms)) or None

    def get_claim(self, project: str, queue: str, claim_id: str, now_ms: int) -> Claim:
        found = self._run("get_claim", project, queue, now_ms, claim_id)
        if not found:
            raise errors.ClaimDoesNotExist(claim_id, queue, project)
        ttl, grace, updated, expires, flat = found
        return Claim(
            claim_id,
            int(ttl),
            int(grace),
            int(updated),
            int(expires),
            tuple(messages_of(flat, now_ms)),
        )

    def renew_claim(
        self, project: str, queue: str, claim_id: str, ttl_s: int, grace_s: int, now_ms: int
    ) -> None:
        if not self._run("renew_claim", project, queue, now_ms, claim_id, ttl_s, grace_s):
            raise errors.ClaimDoesNotExist(claim_id, queue, project)

    def release_claim(self, project: str, queue: str, claim_id: str, now_ms: int) -> None:
        self._run("release_claim", project, queue, now_ms, claim_id)
