"""Every wall-clock bound of the Swift driver in one object, with the relations between them
that its correctness and its cost rest on, checked when a driver is made.

Swift gives no locks and no transactions, so the driver's protocols wait for each other by
time: a claimer gives a taker a grace to index what it took, a post of several messages must
commit before claimers may remove its messages as uncommitted, a pop must delete what it took
before its hold ends. Each bound is a field here; each relation a check in
:meth:`SwiftTimes.problems`. Three bounds come from the configuration (a pool's URI may set
the first two): ``settle_ms``, ``metadata_cache_ms`` and the request timeout.
"""

from __future__ import annotations

import dataclasses
import time

from zaqar_delay import errors
from zaqar_delay.conf.transport import MAX_MESSAGE_TTL
from zaqar_delay.storage.bounds import CLOCK_DISAGREEMENT_MS

# How long past its expiry Swift's object expirer may remove a message's objects: room for the
# clocks of the servers writing them to disagree. Expiry itself is checked on every read.
DELETE_AT_SLACK_S = 3600
# An index entry whose message is missing (or whose post of several is not committed) is
# removed only this long after the message was named: before that, its post may still be
# writing it. A post of several commits only while it is sure to be done before then.
ORPHAN_GRACE_MS = 60_000
# How long a pop holds what it takes before deleting it (a crash in between returns them). A
# pop deletes only while it is sure to be done before then.
POP_HOLD_MS = 60_000
# A claim indexes a message it took as claimed a few requests after taking its slot. A claimer
# that lost that slot leaves the message's index to the taker for this long, and only then
# repairs it (the taker may have died): concurrent claimers meet the same due entries, and
# each of them repairing what the winner is about to index cost five requests per message.
TAKER_GRACE_MS = 10_000
# How long a push whose next lease another dispatcher took is left for it to move; a push
# still not moved after that is moved for it (it may have died in between). A dispatcher
# moves a push at once after taking its lease (``settle_ms`` later), so this is ample.
LEASE_TAKER_GRACE_MS = 10_000
# Messages named longer ago than this are past every post still running (clocks agreeing to
# within it): each process starts its listings of messages claimable by their names there.
FRONTIER_SLACK_MS = 60_000
# Times python-swiftclient sends a request that got no answer (``retries = 1``).
REQUEST_ATTEMPTS = 2
# A dedup id's records form one chain per epoch of the wall clock (``dedup``): a chain stops
# growing soon after its epoch ends, and Swift reclaims it once every record in it has expired.
DEDUP_EPOCH_MS = 86_400_000
# How far into an epoch a post may still be building on the previous epoch's chain, or a
# listing still miss its newest generation: room for the clocks of the post building and the
# post starting the new chain to disagree (each by up to ``FRONTIER_SLACK_MS``), for the
# requests between a post's reading its clock and its creating a generation, and for a
# container listing to catch up (what is left: over six minutes with the defaults).
DEDUP_OVERLAP_MS = 600_000
# Requests a post makes between reading its clock and creating a generation, at most: the
# previous chain's two reads and its marker's create and settled read, then the create.
DEDUP_DECISION_REQUESTS = 5
# The longest message ttl the driver must remember a dedup id for, unless told the
# configured one (``[transport] max_message_ttl``): the largest that option allows.
LONGEST_MESSAGE_TTL_MS = MAX_MESSAGE_TTL * 1000


@dataclasses.dataclass(frozen=True)
class SwiftTimes:
    """The driver's wall-clock bounds, in milliseconds."""

    settle_ms: int
    metadata_cache_ms: int
    # One attempt of one request, at most (python-swiftclient's ``timeout``).
    request_timeout_ms: int
    orphan_grace_ms: int = ORPHAN_GRACE_MS
    pop_hold_ms: int = POP_HOLD_MS
    taker_grace_ms: int = TAKER_GRACE_MS
    lease_taker_grace_ms: int = LEASE_TAKER_GRACE_MS
    frontier_slack_ms: int = FRONTIER_SLACK_MS
    dedup_epoch_ms: int = DEDUP_EPOCH_MS
    dedup_overlap_ms: int = DEDUP_OVERLAP_MS
    # No message lives longer: a dedup record is kept at least this long after its post.
    max_message_ttl_ms: int = LONGEST_MESSAGE_TTL_MS

    @property
    def request_ms(self) -> int:
        """The longest one request may take, every attempt included."""
        return REQUEST_ATTEMPTS * self.request_timeout_ms

    @property
    def post_deadline_ms(self) -> int:
        """How long after it started a post may still send the write that stores it (its
        message, or the commit of several): the write is then applied before claimers may
        remove the post's messages, and before a repeat of its dedup ids may take them over."""
        return self.orphan_grace_ms - self.request_ms

    @property
    def orphaned_after_ms(self) -> int:
        """How long after a message's name (its due time on its post's clock) a claimer, on
        its own clock, takes the message's post for over: the orphan grace, plus how far the
        two clocks may disagree. The post keeps to its deadline on its own watch; a claimer
        whose clock ran ahead would otherwise remove the messages of a post still committing,
        which would then answer 201 without them."""
        return self.orphan_grace_ms + CLOCK_DISAGREEMENT_MS

    @property
    def first_post_grace_ms(self) -> int:
        """How long a repeat waits for the first post of a dedup id (``dedup_reservation``):
        every post stores itself within ``post_deadline_ms`` plus a request of its start, the
        orphan grace. Swift applies a late write rather than refuse it, so the wait is the
        bound."""
        return self.orphan_grace_ms

    @property
    def pop_held_ms(self) -> int:
        """How long after a pop began (on its clock) the slot it takes a message with lasts:
        the pop hold, plus how far the clock of a claimer judging the slot may run ahead.
        The pop keeps to its deadline on its own watch; a claimer whose clock ran ahead would
        otherwise take a message the pop is about to delete and hand it out twice."""
        return self.pop_hold_ms + CLOCK_DISAGREEMENT_MS

    @property
    def pop_deadline_ms(self) -> int:
        """How long after it started a pop may still delete what it took: each message is
        then deleted (its object first) before its hold ends and a claim may take it."""
        return self.pop_hold_ms - self.request_ms

    def dedup_reclaim_s(self, epoch: int) -> int:
        """When Swift may reclaim the dedup chain of ``epoch`` (``X-Delete-At``, seconds):
        every record a post made in it, during the epoch or within the overlap after it, has
        expired by then, whatever the Swift servers' clocks say (``DELETE_AT_SLACK_S``)."""
        end_ms = (epoch + 1) * self.dedup_epoch_ms
        return (end_ms + self.dedup_overlap_ms + self.max_message_ttl_ms) // 1000 + (
            DELETE_AT_SLACK_S
        )

    def problems(self) -> list[str]:
        """The relations these bounds break, in words (none: the driver may run)."""
        found = []
        if self.post_deadline_ms <= 0:
            found.append(
                f"the orphan grace ({self.orphan_grace_ms} ms) must exceed one request's longest "
                f"time ({self.request_ms} ms), or no post of several could commit in time"
            )
        if self.pop_deadline_ms <= 0:
            found.append(
                f"the pop hold ({self.pop_hold_ms} ms) must exceed one request's longest time "
                f"({self.request_ms} ms), or no pop could delete what it took in time"
            )
        for name, grace in (("taker", self.taker_grace_ms), ("lease", self.lease_taker_grace_ms)):
            if self.settle_ms >= grace:
                found.append(
                    f"settle_ms ({self.settle_ms}) must be under the {name} grace ({grace} ms): "
                    "a taker settles before others repair after it"
                )
        if self.metadata_cache_ms > self.request_timeout_ms:
            found.append(
                f"metadata_cache_ms ({self.metadata_cache_ms}) must be at most the request "
                f"timeout ({self.request_timeout_ms} ms): every metadata write waits it out"
            )
        found.extend(self._dedup_problems())
        if min(self.settle_ms, self.metadata_cache_ms) < 0:
            found.append("settle_ms and metadata_cache_ms must not be negative")
        return found

    def _dedup_problems(self) -> list[str]:
        found = []
        skews_ms = 2 * self.frontier_slack_ms
        deciding_ms = DEDUP_DECISION_REQUESTS * self.request_ms + self.settle_ms
        if self.dedup_overlap_ms < skews_ms + deciding_ms:
            found.append(
                f"the dedup overlap ({self.dedup_overlap_ms} ms) must cover two clocks' "
                f"disagreement and a post's decision ({skews_ms + deciding_ms} ms)"
            )
        if self.dedup_epoch_ms < 4 * self.dedup_overlap_ms:
            found.append(
                f"a dedup epoch ({self.dedup_epoch_ms} ms) must be at least four overlaps "
                f"({self.dedup_overlap_ms} ms)"
            )
        return found

    def checked(self) -> SwiftTimes:
        """These bounds, or StorageConfigError naming each relation they break."""
        found = self.problems()
        if found:
            raise errors.StorageConfigError("Invalid Swift time bounds: " + "; ".join(found))
        return self


def elapsed_ms(started: float) -> float:
    """Milliseconds since ``started`` (``time.monotonic()``)."""
    return (time.monotonic() - started) * 1000
