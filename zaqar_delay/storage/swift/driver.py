"""The OpenStack Swift implementation of the storage contract.

Swift gives no transactions and no conditional overwrite; it gives create-only writes
(``If-None-Match: *``), name-ordered listings with markers, and expiry headers. The driver is
built on those (see ``names`` for the layout and ``slots`` for the claim slots):

- a due message is found by listing up to "now" (``end_marker``), in due order, the
  messages (named for their due times, and claimable by their names until a claim indexes
  them) and the claim index, never by reading every message;
- a message is taken by creating its next claim slot, which exactly one claimer can do, and
  only after reading it due: a due time is changed only by taking a slot too, so no claim
  takes a message a reschedule has made not yet due;
- a dedup id is remembered by creating its next generation, which exactly one post can do.

Listings may lag behind writes on a real cluster. They only ever propose candidates: every
decision is made on objects read by name, which a create makes visible at once. A lagging
listing can delay a message (not yet listed) or show a stale count, never hand it out early
or twice.
"""

from __future__ import annotations

from zaqar_delay import errors
from zaqar_delay.storage.bounds import LIST_SCAN_BUDGET
from zaqar_delay.storage.catalog import CatalogStore
from zaqar_delay.storage.dedup_reservation import DedupReservation
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.caches import Facts, RecentQueueObjects
from zaqar_delay.storage.swift.claims import ClaimOps
from zaqar_delay.storage.swift.connect import SwiftClient
from zaqar_delay.storage.swift.dedup import SwiftDedupRecords
from zaqar_delay.storage.swift.edits import EditOps
from zaqar_delay.storage.swift.messages import MessageOps
from zaqar_delay.storage.swift.queues import QueueOps
from zaqar_delay.storage.swift.timing import SwiftTimes
from zaqar_delay.storage.traits import Durability, Wakeups

DEFAULT_NAMESPACE = "zaqar_delay"


class SwiftDriver(QueueOps, MessageOps, EditOps, ClaimOps):
    """Stores queues in the containers ``<namespace>_*`` of one Swift account."""

    def __init__(
        self,
        swift: SwiftClient,
        namespace: str = DEFAULT_NAMESPACE,
        list_scan_budget: int = LIST_SCAN_BUDGET,
        times: SwiftTimes | None = None,
        dedup_reclaim: bool = True,
    ) -> None:
        """``times``: the driver's time bounds (by default ``swift``'s access's); a driver
        whose bounds break a relation between them is refused (StorageConfigError).
        ``dedup_reclaim``: dedup records in daily chains Swift reclaims, or (False) named as
        earlier releases name them (``dedup``)."""
        self._times = (times or swift.access.times()).checked()
        self._swift = swift
        self._namespace = namespace
        self._list_scan_budget = list_scan_budget
        self._dedup = DedupReservation(
            SwiftDedupRecords(
                swift, self._container(names.DEDUP), self._times, reclaim=dedup_reclaim
            ),
            self._complete_post,
            swift.each,
            self._times.first_post_grace_ms,
        )
        self._dedup_reclaim = dedup_reclaim
        self._committed_posts: Facts[bool] = Facts()
        self._claim_slots: Facts[dict[str, int]] = Facts()
        self._named_frontiers: Facts[str] = Facts()
        self._recent_queue_objects = RecentQueueObjects(swift.access.metadata_cache_ms / 1000)

    def unreachable_reason(self) -> str | None:
        return None if self._swift.ping() else "it does not answer"

    def close(self) -> None:
        self._swift.close()

    def prepare(self) -> list[str]:
        """Create the containers (idempotent)."""
        for kind in names.CONTAINERS:
            self._swift.put_container(self._container(kind))
        return self.deployment_warnings()

    def deployment_warnings(self) -> list[str]:
        if self._dedup_reclaim:
            return []
        return [
            "[drivers:message_store:swift] dedup_reclaim is false: dedup records are kept "
            "until their queue is purged or deleted; set it to true once every server using "
            "this Swift store runs this release"
        ]

    def durability(self) -> Durability:
        """An object server syncs an object to disk before it answers, and the proxy answers
        once a quorum of replicas have: a process crash and a power loss are survived. A
        machine loss and a failover need several replicas, which the ring decides and the
        API does not tell, so they are not claimed."""
        return Durability(
            store="swift",
            replica_acks=0,
            survives=("process crash", "power loss"),
            facts={
                "write": "a quorum of the object's replicas, each synced to disk",
                "replicas": "set by the cluster's object ring, not visible through the API",
            },
        )

    def wakeups(self) -> Wakeups | None:
        return None  # waiting claims re-check at next_claimable_ms

    # A claim is a few requests and a settle wait, which racing claims overlap: a burst of
    # 40 messages reached 40 waiters in about 2.8 s instead of 4.5 s with one (benchmarks/
    # waiting_claims.py); four woke no faster than two.
    waiting_claim_relay = 2

    def catalog(self) -> CatalogStore:
        raise errors.StorageConfigError(
            "The pooling catalog needs a Redis or MongoDB store: Swift can be a pool, not the "
            "catalog"
        )
