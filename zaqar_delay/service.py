"""The use cases of the v2 API, independent of HTTP.

Each public method reads the clock once, applies the API's rules (``validation``) and the
queue's metadata, and calls the storage driver. Methods take already-decoded input except
message posts, whose size limit depends on the queue and must be checked before decoding.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping, Sequence, Set
from typing import Any

from zaqar_delay import errors, jsondoc, metadata_patch, validation
from zaqar_delay.clock import NS_PER_MS, Clock, round_up_ms
from zaqar_delay.conf import Limits
from zaqar_delay.encryption import MessageCipher
from zaqar_delay.journal import NullJournal
from zaqar_delay.lifecycle import Lifecycle
from zaqar_delay.metrics import Metrics
from zaqar_delay.models import (
    Claim,
    ClaimTimes,
    ListPage,
    Message,
    Metadata,
    NewMessage,
    Posted,
    QueueInfo,
    QueueStats,
)
from zaqar_delay.storage.base import Driver
from zaqar_delay.waiting import WaitRoom


class Service:
    """Queues, messages and claims of every project, on one driver."""

    def __init__(
        self,
        driver: Driver,
        limits: Limits,
        clock: Clock,
        metrics: Metrics | None = None,
        journal: NullJournal | None = None,
        cipher: MessageCipher | None = None,
    ) -> None:
        """``cipher`` encrypts the bodies of queues with ``_enable_encrypt_messages``; without
        one, such queues are refused."""
        self.driver = driver
        self.cipher = cipher
        self.limits = limits
        self.clock = clock
        self.metrics = metrics or Metrics(driver, clock)
        self.lifecycle = Lifecycle(self.metrics, journal or NullJournal())
        self.wait_room = WaitRoom(driver.wakeups())

    def now_ms(self) -> int:
        return self.clock.now_ms()

    def _arrival(self) -> tuple[int, int]:
        """A request's arrival: the floored ``now_ms``, and what a relative delay counted from
        it must add to end no earlier than arrival + delay (``clock.round_up_ms``)."""
        now_ns = self.clock.now_ns()
        return now_ns // NS_PER_MS, round_up_ms(now_ns)

    # -- queues --------------------------------------------------------------------------------

    def create_queue(self, project: str, queue: str, metadata: Metadata) -> bool:
        """Create the queue; False if it existed (its metadata is then left as it was)."""
        validation.reserved_metadata(metadata, self.limits)
        self._check_encryption(metadata)
        return self.driver.create_queue(project, queue, metadata, self.now_ms())

    def get_queue(self, project: str, queue: str) -> Metadata:
        """Metadata with reserved defaults; a queue that does not exist shows only defaults."""
        stored = self.driver.get_metadata(project, queue) or {}
        return validation.with_reserved_defaults(stored, self.limits)

    def patch_queue(self, project: str, queue: str, document: Any) -> Metadata:
        operations = metadata_patch.parse(document)
        stored = self.driver.get_metadata(project, queue)
        if stored is None:
            raise errors.QueueDoesNotExist(queue, project)
        updated = metadata_patch.apply(stored, operations)
        try:
            validation.reserved_metadata(updated, self.limits)
        except errors.InvalidRequest as exc:
            raise errors.InvalidBody(exc.description) from exc
        self._check_encryption(updated)
        self.driver.set_metadata(project, queue, updated)
        return validation.with_reserved_defaults(updated, self.limits)

    def _check_encryption(self, metadata: Metadata) -> MessageCipher | None:
        """The cipher for a queue with this metadata: None if it does not ask for encryption;
        InvalidRequest if it does and no key is configured."""
        if not metadata.get("_enable_encrypt_messages"):
            return None
        if self.cipher is None:
            raise errors.InvalidRequest(
                "_enable_encrypt_messages needs a key: set [transport] message_encryption_key "
                "in the server's configuration."
            )
        return self.cipher

    def delete_queue(self, project: str, queue: str) -> None:
        self.driver.delete_queue(project, queue)

    def list_queues(
        self, project: str, marker: str | None, limit: int, detailed: bool
    ) -> list[QueueInfo]:
        validation.queue_limit(limit, self.limits)
        queues = self.driver.list_queues(project, marker, limit, detailed)
        if not detailed:
            return queues
        return [
            QueueInfo(q.name, validation.with_reserved_defaults(q.metadata or {}, self.limits))
            for q in queues
        ]

    def count_queues(self, project: str) -> int:
        return self.driver.count_queues(project)

    def stats(self, project: str, queue: str) -> QueueStats:
        return self.driver.stats(project, queue, self.now_ms())

    def purge(self, project: str, queue: str, resource_types: Set[str]) -> None:
        """Purge what ``resource_types`` names ("messages"; "subscriptions" has nothing)."""
        if "messages" in resource_types:
            self.driver.purge(project, queue)

    # -- messages ------------------------------------------------------------------------------

    def post_messages(self, project: str, queue: str, payload: bytes, client_id: str) -> Posted:
        """Validate and store a ``{"messages": [...]}`` post, all or nothing; returns the ids
        and which messages matched a remembered ``dedup_id`` (see ``Driver.post_messages``).

        The size limit is checked before the body is parsed; the queue's defaults and limits
        are those current when the messages are stored.
        """
        now_ms, round_up = self._arrival()
        parsed: list[Any] = []
        built: list[list[NewMessage]] = []

        def build(metadata: Metadata) -> list[NewMessage]:
            self._check_post_size(metadata, len(payload))
            if not parsed:
                parsed.append(self._raw_messages(payload))
            default_ttl = metadata.get("_default_message_ttl") or self.limits.default_message_ttl
            queue_delay = metadata.get("_default_message_delay") or 0
            built.append(
                [
                    validation.new_message(
                        m, default_ttl, queue_delay, now_ms, self.limits, round_up
                    )
                    for m in parsed[0]
                ]
            )
            cipher = self._check_encryption(metadata)
            return built[-1] if cipher is None else cipher.seal(built[-1])

        posted = self.driver.post_built(project, queue, build, client_id, now_ms)
        self.lifecycle.posted(project, queue, posted, built[-1], now_ms)
        return posted

    @staticmethod
    def _raw_messages(payload: bytes) -> list[Any]:
        document = jsondoc.loads(payload)
        if not isinstance(document, dict) or "messages" not in document:
            raise errors.InvalidRequest("No messages were found in the request body.")
        raw_messages = document["messages"]
        if not isinstance(raw_messages, list):
            raise errors.InvalidBody("Document type not supported.")
        if not raw_messages:
            raise errors.InvalidRequest("No messages to enqueu.")
        return raw_messages

    def _check_post_size(self, metadata: Metadata, size: int) -> None:
        configured = self.limits.max_messages_post_size
        queue_max = metadata.get("_max_messages_post_size") or configured
        if size <= min(configured, queue_max):
            return
        if queue_max < configured:
            raise errors.InvalidRequest(
                "Message collection size is too large. The max size for current queue is "
                f"{queue_max}. It is calculated by max size = min(max_messages_post_size_config: "
                f"{configured}, max_messages_post_size_queue: {queue_max})."
            )
        raise errors.InvalidRequest(f"Message collection size is too large. Max size {configured}")

    def list_messages(
        self,
        project: str,
        queue: str,
        *,
        client_id: str,
        marker: str | None,
        limit: int,
        echo: bool,
        include_claimed: bool,
        include_delayed: bool,
        sort_by_due: bool = False,
    ) -> ListPage:
        """Posting order (Zaqar's), or due order (an extension: unclaimed messages only)."""
        validation.message_limit(limit, self.limits)
        if sort_by_due:
            if include_claimed:
                raise errors.InvalidRequest(
                    "sort=due lists messages no claim holds; it cannot include claimed ones."
                )
            page = self.driver.list_messages_by_due(
                project,
                queue,
                marker=marker,
                limit=limit,
                client_id=client_id,
                echo=echo,
                include_delayed=include_delayed,
                now_ms=self.now_ms(),
            )
        else:
            page = self.driver.list_messages(
                project,
                queue,
                marker=marker,
                limit=limit,
                client_id=client_id,
                echo=echo,
                include_claimed=include_claimed,
                include_delayed=include_delayed,
                now_ms=self.now_ms(),
            )
        return ListPage(self._readable(page.messages), page.next_marker)

    def _readable(self, messages: Sequence[Message]) -> tuple[Message, ...]:
        """Messages as clients see them: bodies of encrypted queues decrypted."""
        messages = tuple(messages)  # the same tuple when it is one
        return messages if self.cipher is None else self.cipher.open(messages)

    def _readable_claim(self, claim: Claim) -> Claim:
        messages = self._readable(claim.messages)
        return (
            claim if messages is claim.messages else dataclasses.replace(claim, messages=messages)
        )

    def get_messages(self, project: str, queue: str, ids: Sequence[str]) -> list[Message]:
        """Bulk GET: NotFound when none of the ids exists."""
        validation.message_limit(len(ids), self.limits)
        found = self.driver.get_messages(project, queue, ids, self.now_ms())
        if not found:
            raise errors.NotFound(
                f"No messages with IDs: {list(ids)!r} found in the queue {queue} for project "
                f"{project}."
            )
        return list(self._readable(found))

    def get_message(self, project: str, queue: str, message_id: str) -> Message:
        found = self.driver.get_messages(project, queue, [message_id], self.now_ms())
        if not found:
            raise errors.MessageDoesNotExist(message_id, queue, project)
        return self._readable(found)[0]

    def delete_message(
        self, project: str, queue: str, message_id: str, claim_id: str | None
    ) -> None:
        now_ms = self.now_ms()
        self.driver.delete_message(project, queue, message_id, claim_id, now_ms)
        self.lifecycle.deleted(project, queue, [message_id], claim_id, now_ms)

    def reschedule_message(
        self,
        project: str,
        queue: str,
        message_id: str,
        claim_id: str | None,
        document: Mapping[str, Any],
    ) -> None:
        """Move a message's due time (``{"delay": S}`` or ``{"deliver_at": T}``); a claimed
        message needs its claim id and leaves the claim: a consumer's "retry later"."""
        now_ms, round_up = self._arrival()
        due_ms = now_ms + validation.due_offset(document, now_ms, self.limits, round_up)
        try:
            self.driver.reschedule_message(project, queue, message_id, claim_id, due_ms, now_ms)
        except (errors.MessageIsClaimed, errors.ClaimNotValid) as exc:
            exc.title = "Unable to reschedule"
            raise
        self.lifecycle.rescheduled(project, queue, message_id, claim_id, due_ms, now_ms)

    def delete_messages(
        self, project: str, queue: str, ids: list[str], claim_ids: list[str] | None
    ) -> None:
        validation.id_list(ids, self.limits)
        if self.limits.message_delete_with_claim_id and not claim_ids:
            raise errors.InvalidRequest(
                'The request should have both "ids" and "claim_ids" parameter in the request when '
                "message_delete_with_claim_id is True."
            )
        now_ms = self.now_ms()
        self.driver.delete_messages(project, queue, ids, claim_ids or None, now_ms)
        self.lifecycle.deleted(project, queue, ids, None, now_ms)

    def pop_messages(self, project: str, queue: str, count: int) -> list[Message]:
        validation.pop_count(count, self.limits)
        now_ms = self.now_ms()
        popped = self.driver.pop_messages(project, queue, count, now_ms)
        self.lifecycle.popped(project, queue, popped, now_ms)
        return list(self._readable(popped))

    # -- claims --------------------------------------------------------------------------------

    def create_claim(
        self, project: str, queue: str, times: ClaimTimes, limit: int, wait_s: float = 0.0
    ) -> Claim | None:
        """Claim up to ``limit`` messages for ``times``.

        With ``wait_s`` (an extension), wait up to that many seconds for a message to become
        claimable: woken by the store when one is posted, released or rescheduled, and by a
        timer at the next due time. Never claims a message before it is due.
        """
        validation.claim_limit(limit, self.limits)
        validation.claim_wait(wait_s, self.limits)

        def attempt() -> Claim | None:
            now_ms = self.now_ms()
            outcome = self.driver.claim(
                project,
                queue,
                ttl_s=times.ttl_s,
                grace_s=times.grace_s,
                limit=limit,
                now_ms=now_ms,
            )
            if outcome.dead_lettered:
                target = outcome.dead_letter_queue
                self.lifecycle.dead_lettered(project, queue, outcome.dead_lettered, target, now_ms)
            claim = outcome.claim
            if claim is not None:
                self.lifecycle.claimed(project, queue, claim.id, claim.messages, now_ms)
            return None if claim is None else self._readable_claim(claim)

        if wait_s <= 0:
            return attempt()
        return self.wait_room.wait_for(
            project, queue, wait_s, attempt, lambda: self._until_claimable_s(project, queue)
        )

    def _until_claimable_s(self, project: str, queue: str) -> float:
        """How long the head of a line may sleep: until the next due time or claim expiry
        (a millisecond past it), at most ``recheck_s``."""
        now_ms = self.now_ms()
        next_ms = self.driver.next_claimable_ms(project, queue, now_ms)
        sleep = self.wait_room.recheck_s
        if next_ms is not None:
            sleep = min(sleep, (next_ms - now_ms + 1) / 1000)
        return sleep

    def get_claim(self, project: str, queue: str, claim_id: str) -> Claim:
        return self._readable_claim(self.driver.get_claim(project, queue, claim_id, self.now_ms()))

    def renew_claim(self, project: str, queue: str, claim_id: str, times: ClaimTimes) -> None:
        self.driver.renew_claim(project, queue, claim_id, times.ttl_s, times.grace_s, self.now_ms())

    def release_claim(self, project: str, queue: str, claim_id: str) -> None:
        now_ms = self.now_ms()
        held: tuple[Message, ...] = ()
        if self.lifecycle.wants_released_ids:
            with contextlib.suppress(errors.ClaimDoesNotExist):
                held = self.driver.get_claim(project, queue, claim_id, now_ms).messages
        self.driver.release_claim(project, queue, claim_id, now_ms)
        self.lifecycle.released(project, queue, claim_id, [m.id for m in held], now_ms)
