"""Frozen value objects passed between the API, the service and the storage drivers."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Sequence
from typing import Any

JSON = Any
Metadata = dict[str, JSON]


@dataclasses.dataclass(frozen=True, slots=True)
class NewMessage:
    """A message ready to store: defaults applied, limits checked; due ``delay_ms`` after now.

    ``dedup_id`` ("" for none) makes the post idempotent: while the queue remembers that id
    (until the first message posted with it would expire, or for its ``dedup_ttl_s`` when
    that is shorter), the message is not stored again. ``hops``: the pushes of this service
    the message came through, one after another (0: a client posted it; ``push.hops``); its
    own pushes carry one more.
    """

    body_json: str
    ttl_s: int
    delay_ms: int
    dedup_id: str = ""
    hops: int = 0
    # How long the dedup id is remembered, in seconds (0: as long as the message lives). A
    # schedule's tick lives until it fires, however late, but its id needs remembering only
    # while a repeated fire may post it again.
    dedup_ttl_s: int = 0

    @property
    def dedup_memory_s(self) -> int:
        """How long after its post a queue remembers this message's dedup id, in seconds:
        its ``dedup_ttl_s``, never past its ttl."""
        return min(self.dedup_ttl_s, self.ttl_s) if self.dedup_ttl_s else self.ttl_s


@dataclasses.dataclass(frozen=True, slots=True)
class Batch:
    """Messages one client posts together, stored all or nothing."""

    messages: Sequence[NewMessage]
    client_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class MessageEdit:
    """What an edit of the stored message ``message_id`` replaces; None keeps the stored
    value. ``claim_id`` is the claim the editor holds the message by (None: no claim).

    ``body_json`` is the new body (already sealed on an encrypted queue), ``due_ms`` the new
    due time, ``ttl_s`` the new time to live, counted like a post's from the message's
    creation.
    """

    message_id: str
    claim_id: str | None
    body_json: str | None = None
    due_ms: int | None = None
    ttl_s: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Deletion:
    """The messages a bulk delete names (``ids``), and the claims the caller holds them by
    (``claim_ids``; None: the caller holds none and deletes whatever claims them)."""

    ids: Sequence[str]
    claim_ids: Sequence[str] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Posted:
    """The outcome of a post: an id per message in request order, and the positions whose
    ``dedup_id`` the queue remembered (their id is that of the message first posted with it,
    and nothing new was stored for them)."""

    ids: list[str]
    duplicates: tuple[int, ...] = ()
    # The version of the queue's metadata the messages were stored under (a conditional
    # post's answer; "" where the driver did not say).
    metadata_version: str = ""
    # The earliest due time of the pushes to subscribers the post added (0: none).
    push_due_ms: int = 0

    def stored(self) -> list[int]:
        """Positions of the messages this post stored."""
        skipped = set(self.duplicates)
        return [i for i in range(len(self.ids)) if i not in skipped]


@dataclasses.dataclass(frozen=True, slots=True)
class VersionedMetadata:
    """A queue's metadata as one read saw it, and its version: what a conditional post
    (``Driver.post_if_current``) checks. Version "" is a queue that does not exist (its
    metadata then reads ``{}``); :data:`UNKNOWN_METADATA` matches no queue."""

    metadata: Metadata
    version: str


# What a poster knows before it has read a queue: its version matches nothing, so the first
# conditional post stores nothing and answers the queue's current metadata.
UNKNOWN_METADATA = VersionedMetadata({}, "?")


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    """A stored message as read at ``now_ms``; ``claim_id`` is set only while a claim is live.
    ``hops``: as the message was posted (``NewMessage.hops``)."""

    id: str
    body: JSON
    ttl_s: int
    created_ms: int
    expires_ms: int
    due_ms: int
    claim_id: str | None
    claim_count: int
    client_id: str
    hops: int = 0

    def age_s(self, now_ms: int) -> int:
        return max(0, (now_ms - self.created_ms) // 1000)


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimTimes:
    """A claim's lease (``ttl_s``) and the life it gives its messages beyond it (``grace_s``),
    both already within the configured limits."""

    ttl_s: int
    grace_s: int


@dataclasses.dataclass(frozen=True, slots=True)
class Claim:
    """A live claim and the messages it still holds."""

    id: str
    ttl_s: int
    grace_s: int
    updated_ms: int
    expires_ms: int
    messages: tuple[Message, ...]

    def age_s(self, now_ms: int) -> int:
        return max(0, (now_ms - self.updated_ms) // 1000)


@dataclasses.dataclass(frozen=True, slots=True)
class OverLimit:
    """Messages a claim took that had been claimed ``_max_claim_count`` times already: not
    returned, and still where they were, held as the claim took them, to be moved to the
    dead-letter queue ``queue`` (``storage.dead_letters``). ``ttl_s``: the copies' ttl
    (``_dead_letter_queue_messages_ttl``), None when each keeps its own."""

    queue: str
    ttl_s: int | None
    messages: tuple[Message, ...]

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(m.id for m in self.messages)

    def copies(self) -> list[NewMessage]:
        """The dead-letter queue's copies, in order: bodies as stored, due at once, ttl
        ``ttl_s`` or each message's own, hops their own (a move is no push)."""
        return [
            NewMessage(json.dumps(m.body), self.ttl_s or m.ttl_s, 0, hops=m.hops)
            for m in self.messages
        ]


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimOutcome:
    """What one claim took: the claim (None when nothing was claimable) and the messages to
    move to the queue's dead-letter queue instead (None when there are none)."""

    claim: Claim | None
    over_limit: OverLimit | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class MessageRef:
    """The id and creation time of a message, enough to describe it in stats."""

    id: str
    created_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts of a queue at ``now_ms``; ``free`` includes delayed messages, as Zaqar counts it."""

    total: int
    claimed: int
    delayed: int
    next_due_ms: int | None
    expired: int
    oldest: MessageRef | None
    newest: MessageRef | None

    @property
    def free(self) -> int:
        return self.total - self.claimed


@dataclasses.dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue's name and, when asked for, its stored metadata."""

    name: str
    metadata: Metadata | None


@dataclasses.dataclass(frozen=True, slots=True)
class ListQuery:
    """What a listing of a queue's messages asks for: up to ``limit`` after ``marker``, the
    messages of ``client_id`` hidden unless ``echo``, claimed (live claim) and delayed
    (``now < due``) ones hidden unless included. A listing by due time lists unclaimed
    messages only, whatever ``include_claimed`` says."""

    marker: str | None
    limit: int
    client_id: str
    echo: bool = False
    include_claimed: bool = False
    include_delayed: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class ListPage:
    """One page of a message listing and the marker of the next page (None at the end)."""

    messages: tuple[Message, ...]
    next_marker: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class PushResult:
    """A subscription's last push attempt: when it was sent (ms), what came of it
    (``delivered``, ``retry`` or ``permanent``) and, when it failed, why."""

    at_ms: int
    outcome: str
    detail: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class NewSubscription:
    """A subscription to store: its subscriber (URI), ttl, options and signing secret."""

    subscriber: str
    ttl_s: int
    options: Metadata
    secret: str


@dataclasses.dataclass(frozen=True, slots=True)
class Subscription:
    """A queue's subscription as read at some ``now``: who is pushed the queue's messages
    (``subscriber``, an http(s) or mailto URI) until ``expires_ms``. ``started_ms`` is when its
    ttl last began (creation, or a ttl change), from which Zaqar counts its age. ``secret``
    keys the signature of its deliveries."""

    id: str
    queue: str
    subscriber: str
    ttl_s: int
    options: Metadata
    started_ms: int
    expires_ms: int
    confirmed: bool
    secret: str
    last_delivery: PushResult | None = None  # the last attempt recorded, if any

    def age_s(self, now_ms: int) -> int:
        return max(0, (now_ms - self.started_ms) // 1000)


@dataclasses.dataclass(frozen=True, slots=True)
class SubscriptionChange:
    """A PATCH of the subscription ``subscription_id``: the fields to replace (None: keep)."""

    subscription_id: str
    subscriber: str | None = None
    ttl_s: int | None = None
    options: Metadata | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class LeaseRequest:
    """A lease of a queue's pushes at ``now_ms``: up to ``limit`` owed by ``owed_by_ms``
    (None: by now), each held for one attempt until ``lease_ms`` after that."""

    now_ms: int
    lease_ms: int
    limit: int
    owed_by_ms: int | None = None

    @property
    def until_ms(self) -> int:
        """The latest owed time the lease takes."""
        return self.now_ms if self.owed_by_ms is None else self.owed_by_ms

    @property
    def end_ms(self) -> int:
        """When the lease ends."""
        return self.until_ms + self.lease_ms


@dataclasses.dataclass(frozen=True, slots=True)
class Delivery:
    """A message owed to a subscription, leased to one dispatcher for one attempt.

    ``id`` (``<subscription id>:<message id>``) is stable across attempts: receivers use it
    to drop duplicates. ``attempts`` counts the attempts made before this one; ``lease``
    identifies this lease when the outcome is recorded. ``owed_ms``: when this attempt is owed
    (the message's due time, or the retry's, and never before the message is due), never sent
    before. ``queue_metadata`` is the queue's
    metadata at the lease: its retry policy, dead-letter queue and ``_delete_after_push`` decide
    what the attempt's outcome does.
    """

    id: str
    project: str
    queue: str
    subscription: Subscription
    message: Message
    attempts: int
    lease: str
    owed_ms: int
    queue_metadata: Metadata


# An attempt and what came of it: None ends the push, a time (ms) owes it again then.
PushOutcome = tuple[Delivery, int | None]


@dataclasses.dataclass(frozen=True, slots=True)
class Settlement:
    """Attempts made under their lease, to record (``Deliveries.settle_pushes``).
    ``consume``: the ids of the deliveries whose messages go once delivered (a queue with
    ``_delete_after_push``). ``unsent``: the ids of the deliveries given back unsent (their
    dispatcher stopped before their time, or leased them too late to send), owed again at
    their time with no attempt more."""

    outcomes: Sequence[PushOutcome]
    consume: Collection[str] = ()
    unsent: Collection[str] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Fire:
    """A message a recurring schedule posted: for its ``slot_ms``, due at ``due_ms`` (the slot
    plus the message's ``delay_ms``, or when it was posted for a time already past);
    ``repeated`` when an earlier fire of the slot posted it (a tick fired again after a crash:
    the post matched its dedup id and stored nothing)."""

    slot_ms: int
    due_ms: int
    message_id: str
    delay_ms: int = 0
    repeated: bool = False

    @property
    def late(self) -> bool:
        """Due after its slot plus its delay: posted after an outage, or by a dispatcher
        behind."""
        return self.due_ms > self.slot_ms + self.delay_ms
