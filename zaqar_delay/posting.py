"""Message posts: a raw ``{"messages": [...]}`` body turned into stored messages, built from the
queue's metadata as it is when they are stored.

A post's defaults (ttl, delay), limits (post size) and encryption come from the queue's
metadata, which another server may change at any moment. The poster remembers the metadata
and version each queue last had, builds the messages from it and stores them with
``Driver.post_if_current``; when the store answers that the metadata changed, it builds them
again from what the store returned. On Redis a post is then one round trip.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from zaqar_delay import errors, jsondoc, push_hops, validation
from zaqar_delay.conf import Limits
from zaqar_delay.encryption import QueueEncryption
from zaqar_delay.message_quota import Admitted, MessageQuota
from zaqar_delay.models import UNKNOWN_METADATA, Batch, NewMessage, Posted, VersionedMetadata
from zaqar_delay.policy import QueuePolicy
from zaqar_delay.stores import Stores

# Conditional posts tried before giving up on a queue whose metadata keeps changing.
POST_ATTEMPTS = 4
# Queues whose metadata one poster remembers (forgotten all at once when full).
METADATA_CACHE_SIZE = 10_000


@dataclasses.dataclass(frozen=True, slots=True)
class PushOrigin:
    """What a post made by a push of this service carries: the push's delivery id ("" for
    none: ``X-Zaqar-Delay-Delivery-Id``) and the pushes it came through (``push_hops``)."""

    delivery_id: str = ""
    hops: int = 0

    def applied(self, messages: list[NewMessage], most_hops: int) -> list[NewMessage]:
        """The post's messages with their hops (``push_hops.of_post``; PushLoopRefused past
        ``most_hops``), and each without a ``dedup_id`` given one from the delivery and its
        place in the post: a push sent again (its answer lost, or a 503 after the write)
        stores nothing twice, so a queue fed by another queue's pushes gets each message
        once."""
        hops = push_hops.of_post(self.hops, len(messages))
        push_hops.check(hops, most_hops)
        if not self.delivery_id and not hops:
            return messages
        return [
            dataclasses.replace(
                m,
                dedup_id=m.dedup_id or (self.delivery_id and f"delivery:{self.delivery_id}:{i}"),
                hops=hops,
            )
            for i, m in enumerate(messages)
        ]


# A post no push made.
CLIENT_POST = PushOrigin()


class MessagePoster:
    """Validates and stores message posts on each queue's store, all or nothing."""

    def __init__(
        self,
        stores: Stores,
        limits: Limits,
        encryption: QueueEncryption,
        quota: MessageQuota | None = None,
    ) -> None:
        """``stores``: where each queue lives (a post places a new queue first). ``quota``:
        what admits the messages of a client's post (none: all are)."""
        self.stores = stores
        self.limits = limits
        self.encryption = encryption
        self.quota = quota
        self._known: dict[tuple[str, str], VersionedMetadata] = {}

    def knows(self, project: str, queue: str) -> bool:
        """Whether this poster stored messages in the queue lately (so it existed)."""
        return (project, queue) in self._known

    def post(
        self,
        project: str,
        queue: str,
        payload: bytes,
        client_id: str,
        now_ms: int,
        round_up: int,
        origin: PushOrigin = CLIENT_POST,
    ) -> tuple[Posted, list[NewMessage]]:
        """Store the post's messages; returns the outcome and the messages as built (bodies
        as posted). ``now_ms`` and ``round_up`` are the post's arrival (``clock.arrival``).
        ``origin``: the push that made the post, if one did (PushLoopRefused past
        ``[transport] max_push_hops``).

        The size limit is checked before the body is parsed, and the body is parsed once.
        """
        push_hops.check(origin.hops, self.limits.max_push_hops)  # before the body is parsed
        raw_messages: list[Any] = []
        admitted: list[Admitted] = []

        def build(policy: QueuePolicy) -> list[NewMessage]:
            self.check_size(policy, len(payload))
            if not raw_messages:
                raw_messages.extend(self._raw_messages(payload))
                # Once, however often built.
                admitted.extend(self._admit(project, queue, raw_messages, now_ms))
            built = self._build(raw_messages, policy, now_ms, round_up)
            return origin.applied(built, self.limits.max_push_hops)

        try:
            posted, built = self._store(project, queue, client_id, now_ms, build, seal=False)
        except errors.ZaqarDelayError as exc:
            # A store that failed may have stored them (a write whose answer was lost): they
            # stay on the tally until the next count.
            if not isinstance(exc, errors.StorageUnavailable) or isinstance(
                exc, errors.FirstPostPending
            ):
                self._give_back(admitted, len(raw_messages))
            raise
        self._give_back(admitted, len(posted.duplicates))
        return posted, built

    def post_built(
        self,
        project: str,
        queue: str,
        messages: list[NewMessage],
        client_id: str,
        now_ms: int,
        seal: bool = False,
    ) -> tuple[Posted, list[NewMessage]]:
        """Store messages the service built itself (a push's dead letter), sealed when the
        queue encrypts its messages or ``seal`` says so (they come from a queue that does)."""
        return self._store(project, queue, client_id, now_ms, lambda _: messages, seal)

    def _give_back(self, admitted: list[Admitted], count: int) -> None:
        """Give the quota back ``count`` messages of a post that did not store them."""
        if self.quota is not None and count:
            for each in admitted:
                self.quota.give_back(each, count)

    def _admit(
        self, project: str, queue: str, raw_messages: list[Any], now_ms: int
    ) -> list[Admitted]:
        """Admit the post's messages against the project's message quota; what was admitted,
        to give back what is not stored. Past it, a post whose every message repeats a dedup
        id the queue remembers is let through all the same (admitted for nothing): it stores
        nothing, and its answer is the first post's, as a retry expects."""
        if self.quota is None:
            return []
        try:
            admitted = self.quota.admit(project, len(raw_messages))
            return [] if admitted is None else [admitted]
        except errors.QuotaExceeded:
            ids = [m.get("dedup_id") if isinstance(m, dict) else None for m in raw_messages]
            wanted = [i for i in ids if isinstance(i, str) and i]
            if len(wanted) < len(ids):
                raise
            # Asked where the queue lives, not placed: a refused post creates no queue.
            if not self.stores.for_queue(project, queue).remembers_dedup_ids(
                project, queue, wanted, now_ms
            ):
                raise
            return []

    def _store(
        self,
        project: str,
        queue: str,
        client_id: str,
        now_ms: int,
        build: Callable[[QueuePolicy], list[NewMessage]],
        seal: bool,
    ) -> tuple[Posted, list[NewMessage]]:
        """Build the messages from the queue's metadata as the store has it, and store them,
        all or nothing."""
        key = (project, queue)
        known = self._known.get(key, UNKNOWN_METADATA)
        fresh = False  # whether ``known`` is what the store answered to this post
        for _ in range(POST_ATTEMPTS):
            built: list[NewMessage] = []
            stored: list[NewMessage] = []
            if known is not UNKNOWN_METADATA:
                policy = QueuePolicy.of(known.metadata)
                try:
                    built = build(policy)
                except errors.InvalidRequest:
                    if fresh or not self._queue_limits_size(policy):
                        raise
                    # Maybe refused by the queue's remembered size limit, which another
                    # process may have raised since: asked of the store before refusing.
                    known, fresh = UNKNOWN_METADATA, True
                    continue
                cipher = self.encryption.for_queue(policy, seal)
                stored = built if cipher is None else cipher.seal(built, project, queue)
            # A post creates the queue it names when it does not exist: placed first, once
            # there is something to store (a post refused once its messages are built, as
            # invalid or past a quota, places no queue).
            store = self.stores.place if stored else self.stores.for_queue
            outcome = store(project, queue).post_if_current(
                project, queue, Batch(stored, client_id), now_ms, known.version
            )
            if isinstance(outcome, VersionedMetadata):
                known, fresh = outcome, True
                continue
            if len(self._known) >= METADATA_CACHE_SIZE:
                self._known.clear()
            self._known[key] = VersionedMetadata(known.metadata, outcome.metadata_version)
            return outcome, built
        raise errors.StorageUnavailable(f"The metadata of queue {queue} kept changing")

    def _build(
        self, raw_messages: list[Any], policy: QueuePolicy, now_ms: int, round_up: int
    ) -> list[NewMessage]:
        default_ttl = policy.message_ttl(self.limits.default_message_ttl)
        queue_delay = policy.default_message_delay
        return [
            validation.new_message(m, default_ttl, queue_delay, now_ms, self.limits, round_up)
            for m in raw_messages
        ]

    def _raw_messages(self, payload: bytes) -> list[Any]:
        document = jsondoc.loads(payload)
        if not isinstance(document, dict) or "messages" not in document:
            raise errors.InvalidRequest("No messages were found in the request body.")
        raw_messages = document["messages"]
        if not isinstance(raw_messages, list):
            raise errors.InvalidBody("Document type not supported.")
        if not raw_messages:
            raise errors.InvalidRequest("No messages to enqueu.")
        most = self.limits.max_messages_per_post
        if len(raw_messages) > most:
            raise errors.InvalidRequest(
                f"A post may hold at most {most} messages; this one holds {len(raw_messages)}."
            )
        return raw_messages

    def _queue_limits_size(self, policy: QueuePolicy) -> bool:
        """Whether the queue's own post size limit is below the configured one."""
        queue_max = policy.max_messages_post_size
        return queue_max is not None and queue_max < self.limits.max_messages_post_size

    def check_size(self, policy: QueuePolicy, size: int) -> None:
        """Refuse a post (or an edit) of ``size`` bytes over the queue's limit."""
        configured = self.limits.max_messages_post_size
        if size <= policy.most_post_bytes(configured):
            return
        queue_max = policy.max_messages_post_size or configured
        if queue_max < configured:
            raise errors.PostTooLarge(
                "Message collection size is too large. The max size for current queue is "
                f"{queue_max}. It is calculated by max size = min(max_messages_post_size_config: "
                f"{configured}, max_messages_post_size_queue: {queue_max})."
            )
        raise errors.PostTooLarge(f"Message collection size is too large. Max size {configured}")
