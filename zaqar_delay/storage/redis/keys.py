"""Every Redis key name the driver uses, in one place.

All keys of one queue carry the hash tag ``{project/queue}`` so each script touches one
cluster slot. Queue names cannot contain ``/`` or braces, so the tag is unambiguous. A
project id may hold anything, braces included: on a Cluster, the queues of a project whose
id begins with ``}`` are tagged by the queue's name instead (``QUEUE_TAGGED``).
The order of :meth:`QueueKeys.as_list` is the ``KEYS`` order every queue script expects
(see ``lua/lib.lua``).
"""

from __future__ import annotations

import dataclasses
import functools

from zaqar_delay.errors import StorageConfigError

# What a key prefix may not hold: Redis's glob syntax, because the driver scans and subscribes
# by patterns under its prefix (a queue index scan, the wake channels, the layout upgrade), and
# a glob there would match the keys of every other prefix on the store; and braces, because a
# hash tag in the prefix would put every key of the prefix in one Cluster slot.
PREFIX_REFUSED = frozenset("*?[]\\{}")
# What follows the prefix in the keys of a queue of a project whose id begins with "}", on a
# Cluster. "{project/queue}" would be "{}...": Redis hashes a key whose first braces hold
# nothing whole, so each of the queue's keys would go to its own slot and every script on
# them would be refused. "!{queue/project}" tags them by "queue/" and is spelt as no other
# key is (theirs follow the prefix with ":{", and a prefix holds no braces).
QUEUE_TAGGED = "!"


# The end of a queue's hash key, and of its two trash keys named after it (lua/lib.lua).
QUEUE_SUFFIX = ":q"
TRASH_SUFFIX = ":mt"
TRASH_INDEXES_SUFFIX = ":mx"


@dataclasses.dataclass(frozen=True, slots=True)
class QueueKeys:
    """The keys of one queue."""

    # HASH: m = metadata JSON, cr = created ms, seq = last message sequence, n = messages stored,
    # expired = messages deleted on expiry so far
    queue: str
    # Key prefixes of the message buckets (see lua/lib.lua): "<bodies>:<n>" is a HASH of
    # sequence number -> body JSON and "<records>:<n>" one of sequence number -> record, for
    # the sequence numbers n * 128 to n * 128 + 127, so each stays a compact listpack
    bodies: str
    records: str
    buckets: str  # ZSET: the number of every bucket holding messages, scored by itself
    ready: str  # ZSET: unclaimed message (lib.lua's member_of its sequence) scored by due ms
    claimed: str  # ZSET: claimed message (member_of) scored by its claim's expiry ms
    # ZSET: bucket number scored at or before the earliest expiry ms of its messages
    expiry: str
    holders: str  # HASH: sequence number of a claimed message -> "<claim id>|<expiry ms>"
    aliases: str  # HASH: id of a message moved in from another queue -> its sequence number
    claims: str  # HASH: claim id -> msgpack [ttl, grace, updated, expires, sequences...]
    claim_expiry: str  # ZSET: claim id scored by expiry ms
    waiters: str  # STRING with an expiry: set while some server holds waiting claims here
    wake: str  # pub/sub channel: "a message may have become claimable" (only while waiters)
    dedup: str  # HASH: dedup_id -> msgpack [message id, expires ms] (idempotent posting)
    dedup_expiry: str  # ZSET: dedup_id scored by the ms at which the queue forgets it
    # HASH: subscription id -> msgpack [subscriber, ttl, started, expires, confirmed, options
    # JSON, secret] (the S_* positions in lua/lib.lua)
    subscriptions: str
    subscription_ids: str  # ZSET: subscription id, score 0 (listed in id order)
    # ZSET: "<subscription id>:<message id>" owed a push, scored by the ms of its next attempt
    # (while leased: the lease's end)
    deliveries: str
    # HASH: delivery -> msgpack [attempts made, lease token or "", the ms a rate limit
    # reserved for it (0: none)]
    delivery_info: str
    # HASH: subscription id -> msgpack {t = next free ms of its rate limit, f = {delivery ->
    # lease end} of its pushes in flight} (only for subscriptions with dispatch limits)
    push_limits: str
    # ZSET, all scores 0: "<subscription id>|<owed ms, 16 hex digits>|<message id>" of the
    # pushes parked while their subscription had its most requests in flight, in owed order
    parked: str

    def as_list(self) -> list[str]:
        return [getattr(self, field.name) for field in dataclasses.fields(self)]

    # Two keys only a purge or deletion writes, named after the queue key in the scripts too
    # (lib.lua), so that the calls that serve clients do not carry them in KEYS.

    @property
    def trash(self) -> str:
        """ZSET: the number of every bucket of purged or deleted messages not freed yet,
        scored by itself: dead from the moment it is put there (lib.lua, removal.py)."""
        return self.queue[: -len(QUEUE_SUFFIX)] + TRASH_SUFFIX

    @property
    def trash_indexes(self) -> str:
        """HASH: name of an index a purge or deletion detached (renamed) -> "z" (a ZSET), or
        "h" and its HSCAN cursor (a HASH); "#": the last number given to one."""
        return self.queue[: -len(QUEUE_SUFFIX)] + TRASH_INDEXES_SUFFIX


@dataclasses.dataclass(frozen=True, slots=True)
class KeySpace:
    """Builds key names under one prefix: a non-empty one, without glob characters or braces
    (``PREFIX_REFUSED``) or control characters; ``StorageConfigError`` otherwise.
    ``cluster``: the keys are for a Redis Cluster (see ``QUEUE_TAGGED``)."""

    prefix: str = "zd"
    cluster: bool = False

    def __post_init__(self) -> None:
        refused = sorted({c for c in self.prefix if c in PREFIX_REFUSED or not c.isprintable()})
        if not self.prefix or refused:
            raise StorageConfigError(
                f"The key_prefix {self.prefix!r} cannot be used: a Redis key prefix must not "
                "be empty nor hold control characters, glob characters (* ? [ ] \\) or braces"
                + (f" (it holds {''.join(refused)!r})." if refused else ".")
            )

    def queue(self, project: str, queue: str) -> QueueKeys:
        """The keys of one queue, remembered for the most recently used queues."""
        return _queue_keys(self, project, queue)

    def script_keys(self, project: str, queue: str) -> tuple[str, ...]:
        """``queue(project, queue).as_list()``: the ``KEYS`` of every queue script, remembered
        for the most recently used queues (every script call passes all of them)."""
        return _script_keys(self, project, queue)

    def passing_queue(self, project: str, queue: str) -> QueueKeys:
        """``queue`` for a pass over many queues (a project's message count): built, not
        remembered, so the pass does not push the queues in use out of the remembered."""
        return self._build_queue(project, queue)

    def _build_queue(self, project: str, queue: str) -> QueueKeys:
        base = f"{self.prefix}:{{{project}/{queue}}}"
        if self.cluster and project.startswith("}"):
            base = f"{self.prefix}:{QUEUE_TAGGED}{{{queue}/{project}}}"
        return QueueKeys(
            queue=f"{base}{QUEUE_SUFFIX}",
            bodies=f"{base}:mb",
            records=f"{base}:mr",
            buckets=f"{base}:mn",
            ready=f"{base}:rd",
            claimed=f"{base}:cd",
            expiry=f"{base}:xb",
            holders=f"{base}:h",
            aliases=f"{base}:al",
            claims=f"{base}:cl",
            claim_expiry=f"{base}:ce",
            waiters=f"{base}:w",
            wake=f"{base}:wake",
            dedup=f"{base}:d",
            dedup_expiry=f"{base}:de",
            subscriptions=f"{base}:s",
            subscription_ids=f"{base}:si",
            deliveries=f"{base}:p",
            delivery_info=f"{base}:pi",
            push_limits=f"{base}:pl",
            parked=f"{base}:pk",
        )

    def legacy_queue(self, project: str, queue: str) -> list[str]:
        """The message keys of a queue in the layout before buckets (``lua/upgrade.lua``):
        bodies, infos, fifo, ready, claimed and expiry."""
        base = f"{self.prefix}:{{{project}/{queue}}}"
        return [f"{base}:{suffix}" for suffix in ("b", "i", "f", "r", "c", "e")]

    def legacy_fifo_pattern(self) -> str:
        """Pattern matching the posting-order key of every queue in the layout before buckets."""
        return f"{self.prefix}:{{*}}:f"

    def queue_of_key(self, key: str) -> tuple[str, str]:
        """The (project, queue) whose hash tag a key carries."""
        tag = key[len(self.prefix) + 2 : key.rindex("}")]
        project, _, queue = tag.rpartition("/")
        return project, queue

    def layout(self) -> str:
        """STRING: the version of the message layout the data is in (absent: none yet)."""
        return f"{self.prefix}:layout"

    def wake_pattern(self) -> str:
        """Pattern matching the wake channel of every queue."""
        return f"{self.prefix}:*:wake"

    def pushes(self) -> str:
        """ZSET of every queue with pushes owed (member ``queue_member``), scored by the ms of
        its earliest one: how dispatchers find due pushes in one call, whatever the number of
        queues (its own cluster slot)."""
        return f"{self.prefix}:{{pushes}}"

    def removals(self) -> str:
        """ZSET of every queue whose purge or deletion is freeing its trash (member
        ``queue_member``), scored by the epoch seconds it began (``removal.py``)."""
        return f"{self.prefix}:{{removals}}"

    def project_queues_pattern(self) -> str:
        """Pattern matching every project's queue index (an empty index has no key)."""
        return f"{self.prefix}:{{*}}:queues"

    def project_queues(self, project: str) -> str:
        """ZSET of the project's queue names (score 0, listed lexicographically)."""
        return f"{self.prefix}:{{{project}}}:queues"


# Queues whose key names a process remembers (each QueueKeys is about 2 KB).
REMEMBERED_QUEUES = 4096


@functools.lru_cache(maxsize=REMEMBERED_QUEUES)
def _queue_keys(space: KeySpace, project: str, queue: str) -> QueueKeys:
    return space._build_queue(project, queue)


@functools.lru_cache(maxsize=REMEMBERED_QUEUES)
def _script_keys(space: KeySpace, project: str, queue: str) -> tuple[str, ...]:
    return tuple(space.queue(project, queue).as_list())
