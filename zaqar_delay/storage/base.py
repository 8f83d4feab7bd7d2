"""The storage contract every driver implements.

Drivers receive ``now_ms`` from the service (they never read a clock), apply no API validation,
and turn every backend failure into :class:`zaqar_delay.errors.StorageUnavailable`. The contract
suite in ``tests/storage`` is the executable form of these docstrings.
"""

from __future__ import annotations

import abc
import hashlib
import json
from collections.abc import Mapping, Sequence

from zaqar_delay import errors
from zaqar_delay.models import (
    Batch,
    Claim,
    ClaimOutcome,
    ClaimTimes,
    Deletion,
    ListPage,
    ListQuery,
    Message,
    MessageEdit,
    Metadata,
    NewMessage,
    OverLimit,
    Posted,
    QueueInfo,
    QueueStats,
    VersionedMetadata,
)
from zaqar_delay.storage import dead_letters
from zaqar_delay.storage.catalog import CatalogStore
from zaqar_delay.storage.deliveries import DeliveryStore
from zaqar_delay.storage.subscriptions import SubscriptionStore
from zaqar_delay.storage.traits import Durability, Wakeups

#: The metadata version :meth:`Driver.post_if_current` takes as current whatever the queue's
#: metadata is: a post that builds nothing from the queue's defaults (``post_messages``).
ANY_METADATA_VERSION = "*"


def metadata_version_of(stored_json: str | bytes | None) -> str:
    """The version of a queue's metadata that :meth:`Driver.post_if_current` checks: the SHA-1
    of the metadata's JSON text exactly as the store holds it, "" for a queue that does not
    exist. Every driver uses this one scheme (post.lua computes it inside Redis with
    ``redis.sha1hex``); :data:`~zaqar_delay.models.UNKNOWN_METADATA`'s "?" matches no queue."""
    if stored_json is None:
        return ""
    text = stored_json.encode() if isinstance(stored_json, str) else stored_json
    return hashlib.sha1(text).hexdigest()


def stale_metadata(stored_json: str | None, expected_version: str) -> VersionedMetadata | None:
    """The queue's metadata and version when ``stored_json`` (its metadata as stored, None for
    no queue) is not at ``expected_version``: :meth:`Driver.post_if_current`'s refusal."""
    current = metadata_version_of(stored_json)
    if current == expected_version:
        return None
    return VersionedMetadata({} if stored_json is None else dict(json.loads(stored_json)), current)


class Driver(SubscriptionStore, DeliveryStore):
    """A message store scoped by (project, queue), with the queues' subscriptions and the
    pushes owed to them."""

    # -- lifecycle -----------------------------------------------------------------------------

    def ping(self) -> bool:
        """True when the store answers; never raises."""
        return self.unreachable_reason() is None

    @abc.abstractmethod
    def unreachable_reason(self) -> str | None:
        """None when the store answers; else why it does not, in one line for an operator
        (the server's start, the status check, a pool's registration). Never raises."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections; the driver is unusable afterwards."""

    def prepare(self) -> list[str]:
        """Make the store ready, once, before serving: create indexes, check the deployment.

        Idempotent. Returns warnings to log; raises StorageConfigError (one line) when the
        store must not be used as configured.
        """
        return []

    def durability(self) -> Durability | None:
        """What an acknowledged write survives on this store as it is configured now; None
        when the driver cannot tell."""
        return None

    def deployment_warnings(self) -> list[str]:
        """The checks of ``prepare`` without its changes (``zaqar-delay-status upgrade
        check``): warnings about the deployment; StorageConfigError when ``prepare`` would
        refuse it. Read-only."""
        return []

    def pending_changes(self) -> list[str]:
        """What the next ``prepare`` would change in the store (indexes to build, data to
        move to a new layout), one line each; empty when nothing. Read-only."""
        return []

    def clock_ms(self) -> int | None:
        """The store's own clock, in epoch milliseconds (one round trip), for telling how far
        the service's clock is from it; None when the store shows none. Read-only."""
        return None

    def wakeups(self) -> Wakeups | None:
        """The store's wake-up channel for waiting claims; None when it has none (waiting
        claims then rely on ``next_claimable_ms`` and a slow re-check)."""
        return None

    #: How many of a queue's sleeping waiting claims one that claimed something wakes (see
    #: ``zaqar_delay.waiting``). One where claims racing for a queue's oldest messages cost the
    #: store more than they save: Redis runs claims one after another anyway, MongoDB retries
    #: the lost updates. More where a claim is mostly waiting on requests, so racing claims
    #: overlap.
    waiting_claim_relay = 1

    @abc.abstractmethod
    def catalog(self) -> CatalogStore:
        """The pooling catalog kept in this store (asked of the default store only)."""

    @abc.abstractmethod
    def holds_queues(self) -> bool:
        """Whether any queue of any project is stored here (a pool may be deleted only when
        none is)."""

    # -- queues --------------------------------------------------------------------------------

    @abc.abstractmethod
    def create_queue(self, project: str, queue: str, metadata: Metadata, now_ms: int) -> bool:
        """Create the queue with ``metadata``; False (metadata untouched) if it already exists."""

    @abc.abstractmethod
    def get_metadata(self, project: str, queue: str) -> Metadata | None:
        """The stored metadata, or None when the queue does not exist."""

    def get_metadata_many(self, project: str, queues: Sequence[str]) -> list[Metadata | None]:
        """:meth:`get_metadata` of each queue, in order; a driver may read them in one call."""
        return [self.get_metadata(project, queue) for queue in queues]

    @abc.abstractmethod
    def set_metadata(self, project: str, queue: str, metadata: Metadata) -> None:
        """Replace the metadata of an existing queue; QueueDoesNotExist otherwise."""

    def put_metadata_many(
        self, project: str, metadata: Mapping[str, Metadata], now_ms: int
    ) -> None:
        """Give each queue of ``metadata`` its metadata: replaced where the queue exists,
        created with it (as :meth:`create_queue` creates) where it does not. Each queue is
        written whole or not at all; a driver may write them all in one call."""
        for queue, one in metadata.items():
            try:
                self.set_metadata(project, queue, one)
            except errors.QueueDoesNotExist:
                if not self.create_queue(project, queue, one, now_ms):
                    self.set_metadata(project, queue, one)  # made meanwhile

    @abc.abstractmethod
    def delete_queue(self, project: str, queue: str) -> None:
        """Delete the queue, its messages, claims and subscriptions; a missing queue is not an
        error."""

    @abc.abstractmethod
    def list_queues(
        self, project: str, marker: str | None, limit: int, detailed: bool
    ) -> list[QueueInfo]:
        """Up to ``limit`` queues of ``project`` named after ``marker``, sorted by name."""

    @abc.abstractmethod
    def count_queues(self, project: str) -> int:
        """How many queues ``project`` has."""

    @abc.abstractmethod
    def count_messages(self, project: str, most: int, now_ms: int) -> int:
        """How many messages ``project`` holds over all its queues on this store, delayed and
        claimed ones included, counted up to ``most`` at least (a store may stop there): what
        ``[transport] max_messages_per_project`` holds a project to. Expired messages count
        only while the store has not collected them (a Redis store collects a bounded number
        of each queue's on the way). On Redis and MongoDB each queue counts the larger of its
        messages and its remembered dedup ids, which take the store's space until the message
        first posted with each would expire, deleted or not; Swift counts messages alone (it
        keeps dedup records up to a day and the longest ttl longer, and a count would list
        them all)."""

    @abc.abstractmethod
    def stats(self, project: str, queue: str, now_ms: int) -> QueueStats:
        """Counts of unexpired messages; zeros for a missing queue."""

    @abc.abstractmethod
    def purge(self, project: str, queue: str) -> None:
        """Delete every message and claim of the queue, delayed and claimed ones included."""

    # -- messages ------------------------------------------------------------------------------

    def post_messages(
        self,
        project: str,
        queue: str,
        messages: Sequence[NewMessage],
        client_id: str,
        now_ms: int,
    ) -> Posted:
        """Store the messages in order (creating the queue if needed) and return their ids.

        A message is due at ``now_ms + delay_ms`` and expires at ``now_ms + ttl_s * 1000``.
        All or nothing: either every message is stored or none is.

        A message with a ``dedup_id`` the queue remembers is not stored: its position is
        reported in ``Posted.duplicates`` with the first message's id. Otherwise the queue
        remembers the id until this message's expiry, whatever becomes of the message; of
        concurrent posts with one id exactly one stores it. Purge and delete forget every id.
        """
        posted = self.post_if_current(
            project, queue, Batch(messages, client_id), now_ms, ANY_METADATA_VERSION
        )
        assert isinstance(posted, Posted)  # the version "any" is never stale
        return posted

    @abc.abstractmethod
    def post_if_current(
        self, project: str, queue: str, batch: Batch, now_ms: int, metadata_version: str
    ) -> Posted | VersionedMetadata:
        """Store the batch as :meth:`post_messages` does, only if the queue's metadata is
        still at ``metadata_version`` (:func:`metadata_version_of`; messages built from stale
        defaults are never stored), or whatever it is for ``ANY_METADATA_VERSION``.

        Otherwise store nothing and return the queue's current metadata and version, to build
        the messages again. The answer's ``Posted.metadata_version`` is the version they were
        stored under (posting creates a missing queue, with metadata ``{}``).
        """

    @abc.abstractmethod
    def remembers_dedup_ids(
        self, project: str, queue: str, dedup_ids: Sequence[str], now_ms: int
    ) -> bool:
        """Whether the queue remembers every one of ``dedup_ids`` at ``now_ms``, with the post
        that first carried it stored: a post whose every message repeats one of them stores
        nothing (:meth:`post_messages`). Only reads; a store may stop reading at the first id
        it does not remember."""

    @abc.abstractmethod
    def list_messages(self, project: str, queue: str, listing: ListQuery, now_ms: int) -> ListPage:
        """Messages in posting order after ``listing.marker`` that pass its filters.

        ``echo`` False hides the caller's own messages; claimed (live claim) and delayed
        (``now < due``) ones are hidden unless included. A driver may examine a bounded number
        of messages per call and return a short page; ``next_marker`` is None only when the
        listing has reached the end. A malformed marker raises InvalidParameter.
        """

    @abc.abstractmethod
    def list_messages_by_due(
        self, project: str, queue: str, listing: ListQuery, now_ms: int
    ) -> ListPage:
        """Unclaimed, unexpired messages by due time (posting order within one millisecond),
        after ``listing.marker``; filters as in ``list_messages`` (``include_claimed`` is
        not read). ``next_marker`` is None only when the page is empty. A malformed marker
        raises InvalidParameter."""

    @abc.abstractmethod
    def get_messages(
        self, project: str, queue: str, ids: Sequence[str], now_ms: int
    ) -> list[Message]:
        """The unexpired messages among ``ids`` (delayed and claimed included), in ``ids`` order."""

    @abc.abstractmethod
    def delete_message(
        self, project: str, queue: str, message_id: str, claim_id: str | None, now_ms: int
    ) -> bool:
        """Delete one message, honouring claims; True when this call removed an unexpired
        message (False: there was none, or it had expired, and is removed as the reaper would;
        two deletes racing for it may both say True on Swift, as :meth:`delete_messages`).

        Missing message: no-op. Live claim and no ``claim_id``: MessageIsClaimed. ``claim_id``
        given: ClaimNotValid if the message holds no live claim or that claim is not live,
        MessageIsClaimed if another live claim holds it.
        """

    @abc.abstractmethod
    def edit_message(self, project: str, queue: str, edit: MessageEdit, now_ms: int) -> int:
        """Replace what ``edit`` names of one message; its id, claim count and place in
        posting order stay.

        Missing or expired message: MessageDoesNotExist. Claims are honoured as by
        ``delete_message``. A new due time makes a message held by the named claim leave it
        (a consumer's "retry later"); a body or ttl alone leaves the claim in place. A new
        ttl whose expiry (creation + ttl) is not after ``now_ms``: InvalidRequest, and
        nothing is written.

        A due time earlier than the message's brings forward its pushes owed after the new
        time and no later than the old one that no live lease holds (owed with the message):
        they are owed at the new time. A push owed after the old time (a retry) keeps its
        time; one that a later due time leaves owed earlier is owed again at that time when
        leased. Returns the new due time when a push came forward, else 0.
        """

    @abc.abstractmethod
    def delete_messages(
        self, project: str, queue: str, deletion: Deletion, now_ms: int
    ) -> list[str]:
        """Delete the messages ``deletion.ids`` names; missing ids are ignored. Returns the
        ids of the unexpired messages this call removed, each once, in ``ids`` order (expired
        ones are removed too, unreported). Two deletes racing for one message may both report
        it (MongoDB, Swift: they read, then delete); Redis reports it once.

        With ``deletion.claim_ids``, every listed message held by a live claim must be held by
        one of them, else MessageIsClaimed and nothing is deleted.
        """

    @abc.abstractmethod
    def pop_messages(self, project: str, queue: str, limit: int, now_ms: int) -> list[Message]:
        """Remove and return up to ``limit`` claimable messages, oldest due first; their
        claim count includes the pop (a delivery, as a claim is)."""

    # -- claims --------------------------------------------------------------------------------

    def create_claim(
        self, project: str, queue: str, times: ClaimTimes, limit: int, now_ms: int
    ) -> Claim | None:
        """:meth:`claim`'s claim, its messages over the limit moved to their dead-letter
        queue in this store (:meth:`move_dead_letters`): a queue whose dead-letter queue
        lives on the same store, as every queue does without pools."""
        outcome = self.claim(project, queue, times, limit, now_ms)
        if outcome.over_limit is not None:
            self.move_dead_letters(project, queue, outcome.over_limit, now_ms)
        return outcome.claim

    @abc.abstractmethod
    def claim(
        self, project: str, queue: str, times: ClaimTimes, limit: int, now_ms: int
    ) -> ClaimOutcome:
        """Claim up to ``limit`` claimable messages, oldest due first (no claim if there are
        none), and say which messages are to go to the dead-letter queue instead.

        Claimable: due, unexpired, and held by no live claim. Each claimed message's claim
        count goes up by one; a message that would expire before the claim lives until
        ``claim expiry + grace``. When the queue's metadata sets both ``_max_claim_count``
        (an integer >= 1) and ``_dead_letter_queue``, a message already claimed
        ``_max_claim_count`` times is not returned: it is reported in the outcome's
        ``over_limit`` (target queue, ttl override, the messages as taken) and left where it
        is, taken as a claim takes it, so no other claim takes it meanwhile; the caller
        moves it (``storage.dead_letters``). Should the caller never move it, it is
        claimable again when this claim would have ended, and the next claim reports it
        again: a message over the limit is never returned and never lost.
        """

    def move_dead_letters(self, project: str, queue: str, over: OverLimit, now_ms: int) -> None:
        """Move the messages ``over`` reports (from this store's ``queue``) to their
        dead-letter queue in this store: same ids and bodies, claim count 0, due now, ttl
        ``over.ttl_s`` or their own, expiring that long from now. By default a copy
        (:meth:`receive_dead_letters`) and then a delete: a crash in between leaves the
        messages here, and the next claim moves them again, which stores nothing twice."""
        dead_letters.copy_then_delete(self, project, queue, over, self, now_ms)

    def delete_dead_letters(self, project: str, queue: str, over: OverLimit, now_ms: int) -> None:
        """Delete from ``queue`` the messages ``over`` reports, once copied to their
        dead-letter queue; those already gone are ignored."""
        self.delete_messages(project, queue, Deletion(over.ids), now_ms)

    @abc.abstractmethod
    def receive_dead_letters(self, project: str, over: OverLimit, now_ms: int) -> None:
        """Store copies of the messages ``over`` reports, dead-lettered from a queue (on this
        store or another), in ``over.queue`` (created if needed): ``over.copies()`` with the
        same ids and client ids, claim count 0, expiring their ttl from now; waiting claims
        woken and pushes owed as for a post. Idempotent by id: a message already here is not
        stored again."""

    @abc.abstractmethod
    def next_claimable_ms(self, project: str, queue: str, now_ms: int) -> int | None:
        """When, after ``now_ms``, a message may next become claimable without any write: the
        earliest future due time or claim expiry. None when nothing is scheduled."""

    @abc.abstractmethod
    def get_claim(self, project: str, queue: str, claim_id: str, now_ms: int) -> Claim:
        """The live claim; ClaimDoesNotExist when unknown, released or expired."""

    @abc.abstractmethod
    def renew_claim(
        self, project: str, queue: str, claim_id: str, ttl_s: int, grace_s: int, now_ms: int
    ) -> None:
        """Restart the live claim with a new ttl, reapplying the lifetime extension.

        ClaimDoesNotExist when the claim is unknown, released or expired.
        """

    @abc.abstractmethod
    def release_claim(self, project: str, queue: str, claim_id: str, now_ms: int) -> None:
        """End the claim; its messages are claimable again at once. Unknown claims are a no-op."""
