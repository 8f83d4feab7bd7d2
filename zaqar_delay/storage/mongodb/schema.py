"""Collection names, document fields and indexes of the MongoDB driver, in one place.

queues:   {p: project, q: queue, m: metadata JSON text, cr: created ms, seq: last sequence}
messages: {_id: id, p, q, k: sequence, b: body JSON text, u: client id, t: ttl s,
           cr: created ms, e: expires ms, ex: expiry as a date (TTL index), d: due ms,
           v: claimable-from ms (d when unclaimed, the claim's expiry when claimed),
           cid: claim id or None, ce: claim expiry ms (0 when unclaimed), cc: claim count}
claims:   {_id: claim id, p, q, t: ttl s, g: grace s, u: updated ms, e: expires ms, ex: date}
waiters:  {_id: wake channel, ex: date until which some server waits on the queue}
wakeups:  {c: wake channel, ex: date}: inserted only while a waiter is announced; servers
          watch inserts with a change stream
dedup:    {_id: id of the message that first took it, p, q, i: dedup id, m: message id, e:
          remembered until ms, ex: date, at: remembered ms, s: 1 once its post is stored
          whole} (dedup.py)
subscriptions: {_id: id, p, q, u: subscriber, t: ttl s, o: options JSON text, st: ms its ttl
          started, e: expires ms, ex: date, c: confirmed, sk: signing secret}
pushes:   {_id: "<subscription id>:<message id>", p, q, s: subscription id, m: message id,
          n: next attempt ms (while leased: the lease's end; while parked: PARKED + owed ms),
          a: attempts made, l: lease token or None, r: ms a rate limit reserved for it}
push_limits: subscriptions' dispatch limit state (push_limits.py)
catalog_pools:   {_id: pool name, u: URI, w: weight, f: flavor, o: options}   (pooling catalog,
catalog_flavors: {_id: flavor name, p: pool names}                              default store
catalog_queues:  {p, q, pool}: the pool each queue lives on                     only: catalog.py)
catalog_meta:    {_id: "generation", n}: moves on when cached placements may be wrong
catalog_removed: {_id: "<project>/<queue>", pool, e: sticky until ms, ex: date}: the pool of a
                 queue removed less than its sticky time ago

Metadata and bodies are stored as JSON text: any JSON is accepted (keys with "$" or ".",
integers beyond 64 bits) and nothing queries inside them.
"""

from __future__ import annotations

import datetime
from collections import Counter
from typing import Any

import pymongo
from pymongo.collection import Collection

from zaqar_delay import topics

QUEUES = "queues"
MESSAGES = "messages"
CLAIMS = "claims"
# Waiting claims: which queues have waiters (until ex), and the wake-ups sent to them.
WAITERS = "waiters"
WAKEUPS = "wakeups"
DEDUP = "dedup"
SUBSCRIPTIONS = "subscriptions"
PUSHES = "pushes"
PUSH_LIMITS = "push_limits"
CATALOG_POOLS = "catalog_pools"
CATALOG_FLAVORS = "catalog_flavors"
CATALOG_QUEUES = "catalog_queues"
CATALOG_META = "catalog_meta"
CATALOG_REMOVED = "catalog_removed"

ASC = pymongo.ASCENDING

# name -> (keys, options). Every query the driver makes is served by one of these.
INDEXES: dict[str, dict[str, tuple[list[tuple[str, int]], dict[str, object]]]] = {
    QUEUES: {
        "project_queue": ([("p", ASC), ("q", ASC)], {"unique": True}),
    },
    MESSAGES: {
        # Claim and pop: claimable (v <= now) in due order, then posting order.
        "claimable": ([("p", ASC), ("q", ASC), ("v", ASC), ("k", ASC)], {}),
        # Listing and oldest/newest: posting order.
        "fifo": ([("p", ASC), ("q", ASC), ("k", ASC)], {"unique": True}),
        # Claimed counts and the return of messages whose claim ran out.
        "claimed": ([("p", ASC), ("q", ASC), ("ce", ASC)], {}),
        # Messages of one claim.
        "claim_id": ([("p", ASC), ("q", ASC), ("cid", ASC)], {}),
        # Unexpired totals.
        "expiry": ([("p", ASC), ("q", ASC), ("e", ASC)], {}),
        # Space reclamation only: every read also filters on e.
        "ttl": ([("ex", ASC)], {"expireAfterSeconds": 0}),
    },
    CLAIMS: {
        "ttl": ([("ex", ASC)], {"expireAfterSeconds": 0}),
    },
    WAITERS: {
        "ttl": ([("ex", ASC)], {"expireAfterSeconds": 0}),
    },
    WAKEUPS: {
        "ttl": ([("ex", ASC)], {"expireAfterSeconds": 0}),
    },
    DEDUP: {
        # Lookups by id, and the race between concurrent posts of one id.
        "dedup_id": ([("p", ASC), ("q", ASC), ("i", ASC)], {"unique": True}),
        # Withdrawal when a post fails.
        "message": ([("p", ASC), ("q", ASC), ("m", ASC)], {}),
        # A project's live ids per queue (the message quota's count).
        "expiry": ([("p", ASC), ("q", ASC), ("e", ASC)], {}),
        "ttl": ([("ex", ASC)], {"expireAfterSeconds": 0}),
    },
    SUBSCRIPTIONS: {
        # Unique by subscriber; listing is by _id within the queue.
        "subscriber": ([("p", ASC), ("q", ASC), ("u", ASC)], {"unique": True}),
        "listing": ([("p", ASC), ("q", ASC), ("_id", ASC)], {}),
        "ttl": ([("ex", ASC)], {"expireAfterSeconds": 0}),
    },
    PUSHES: {
        # Due pushes anywhere (dispatchers), and of one queue (leases), by next attempt.
        "due": ([("n", ASC)], {}),
        "queue_due": ([("p", ASC), ("q", ASC), ("n", ASC)], {}),
        # The pushes of one lease; those still owed for one message.
        "lease": ([("p", ASC), ("q", ASC), ("l", ASC)], {}),
        "message": ([("p", ASC), ("q", ASC), ("m", ASC)], {}),
        # A subscription's parked pushes, oldest first; all of them, to drop.
        "subscription": ([("s", ASC), ("n", ASC)], {}),
    },
    PUSH_LIMITS: {
        # Free request places of a subscription; the one a lease holds; a queue's, to drop.
        "places": ([("s", ASC), ("e", ASC)], {}),
        "holder": ([("s", ASC), ("h", ASC)], {}),
        "queue": ([("p", ASC), ("q", ASC)], {}),
    },
    CATALOG_QUEUES: {
        # Lookups, placement races and listing in name order.
        "project_queue": ([("p", ASC), ("q", ASC)], {"unique": True}),
        # The queues of a pool (counting them, forgetting them with the pool).
        "pool": ([("pool", ASC)], {}),
    },
    CATALOG_REMOVED: {
        "ttl": ([("ex", ASC)], {"expireAfterSeconds": 0}),
    },
}


def as_date(ms: int) -> datetime.datetime:
    """Epoch milliseconds as the aware UTC datetime TTL indexes read."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


def live_per_queue(
    collection: Collection[dict[str, Any]], project: str, most: int, now_ms: int
) -> Counter[str]:
    """The project's documents in ``collection`` live at ``now_ms`` (``e`` after it), counted
    per queue (``q``) on its ``expiry`` index, no further than ``most`` documents; those of
    the server's own queues (whose names sort after every other) are not counted."""
    pipeline: list[dict[str, Any]] = [
        {"$match": {"p": project, "e": {"$gt": now_ms}, "q": {"$lt": topics.INTERNAL}}},
        {"$limit": max(1, most)},
        {"$group": {"_id": "$q", "n": {"$sum": 1}}},
    ]
    return Counter({str(doc["_id"]): int(doc["n"]) for doc in collection.aggregate(pipeline)})


def create_indexes(db: pymongo.database.Database) -> None:  # type: ignore[type-arg]
    """Create every index; existing ones with the same definition are left alone."""
    for collection, indexes in INDEXES.items():
        models = [
            pymongo.IndexModel(keys, name=name, **options)
            for name, (keys, options) in indexes.items()
        ]
        db[collection].create_indexes(models)


def missing_indexes(db: pymongo.database.Database) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    """(collection, index name) of each index :func:`create_indexes` would create."""
    missing = []
    for collection, indexes in INDEXES.items():
        present = set(db[collection].index_information())
        missing += [(collection, name) for name in indexes if name not in present]
    return missing
