"""The use cases of the v2 API, independent of HTTP.

Each public method reads the clock once, applies the API's rules (``validation``) and the
queue's metadata, and calls the storage driver. Methods take already-decoded input except
message posts and edits, whose size limit depends on the queue and must be checked before
decoding.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping, Sequence, Set
from typing import Any

from zaqar_delay import errors, jsondoc, metadata_patch, reserved_metadata, validation
from zaqar_delay.clock import Clock, arrival
from zaqar_delay.conf import Limits
from zaqar_delay.encryption import MessageCipher, QueueEncryption
from zaqar_delay.journal import NullJournal
from zaqar_delay.lifecycle import Lifecycle
from zaqar_delay.message_quota import MessageQuota
from zaqar_delay.metrics import Metrics
from zaqar_delay.models import (
    Claim,
    ClaimTimes,
    Deletion,
    ListPage,
    ListQuery,
    Message,
    MessageEdit,
    Metadata,
    Posted,
    QueueStats,
)
from zaqar_delay.policy import QueuePolicy
from zaqar_delay.posting import CLIENT_POST, MessagePoster, PushOrigin
from zaqar_delay.push_door import PushDoor
from zaqar_delay.queue_listing import QueueListing
from zaqar_delay.quotas import Quotas
from zaqar_delay.schedules.book import Schedules
from zaqar_delay.storage import dead_letters
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.traits import Durability
from zaqar_delay.stores import Stores
from zaqar_delay.waiting import UNPLACED_RECHECK_MS, WaitRooms


class Service:
    """Queues, messages, claims and pushes of every project, each queue on its store."""

    def __init__(
        self,
        driver: Driver,
        limits: Limits,
        clock: Clock,
        metrics: Metrics | None = None,
        journal: NullJournal | None = None,
        cipher: MessageCipher | None = None,
        stores: Stores | None = None,
    ) -> None:
        """``cipher`` seals bodies of queues with ``_enable_encrypt_messages`` (none: refused).
        ``driver`` is the configured store; every queue's store is resolved through
        :attr:`stores` (pools, when given), once per call."""
        self.stores = stores or Stores(driver)
        self.encryption = QueueEncryption(cipher)
        self.limits = limits
        self.clock = clock
        self.metrics = metrics or Metrics(self.stores, clock)
        self.lifecycle = Lifecycle(self.metrics, journal or NullJournal())
        self.wait_rooms = WaitRooms(clock, limits.max_waiting_claims_per_project)
        quota = MessageQuota(limits.max_messages_per_project, self.stores.count_messages, clock)
        self.poster = MessagePoster(self.stores, limits, self.encryption, quota)
        self.quotas = Quotas(self.stores, limits)
        self.listing = QueueListing(self.stores, limits)
        create = functools.partial(self.create_queue, metadata={})
        self.schedules = Schedules(
            self.stores, limits, self.post_messages, self.lifecycle, clock, create, self.encryption
        )
        self.pushes = PushDoor(self.stores, self.lifecycle, self.encryption, self.poster)

    def now_ms(self) -> int:
        return self.clock.now_ms()

    def _store(self, project: str, queue: str) -> Driver:
        return self.stores.for_queue(project, queue)

    def durability(self) -> Durability | None:
        """What an acknowledged write survives on the default store (the health route)."""
        return self.stores.default.durability()

    def stores_reachable(self) -> bool:
        """Whether every store answers (the ping route)."""
        return self.stores.reachable()

    def store_reachability(self) -> dict[str, bool]:
        """Whether each store answers, by name: ``default`` for ``[storage] uri`` (with
        pooling, the catalog's store) first, then each pool's (the health route)."""
        return self.stores.reachability()

    # -- queues --------------------------------------------------------------------------------

    def create_queue(self, project: str, queue: str, metadata: Metadata) -> bool:
        """Create the queue; False if it existed (its metadata is then left as it was)."""
        reserved_metadata.checked(metadata, self.limits, queue)
        self.encryption.for_queue(QueuePolicy.of(metadata))
        self.quotas.check_new_queue(project, queue)
        # Its dead-letter queue is placed when the first dead letter moves (and creates it),
        # not now: one placed now, before it exists, would keep that pool when created with
        # a ``_flavor`` of its own.
        store = self.stores.place(project, queue, reserved_metadata.flavor(metadata))
        return store.create_queue(project, queue, metadata, self.now_ms())

    def get_queue(self, project: str, queue: str) -> Metadata:
        """Metadata with reserved defaults; a queue that does not exist shows only defaults."""
        stored = self._store(project, queue).get_metadata(project, queue) or {}
        return reserved_metadata.with_reserved_defaults(stored, self.limits, queue)

    def patch_queue(self, project: str, queue: str, document: Any) -> Metadata:
        operations = metadata_patch.parse(document)
        stored = self._store(project, queue).get_metadata(project, queue)
        if stored is None:
            raise errors.QueueDoesNotExist(queue, project)
        updated = metadata_patch.apply(stored, operations)
        try:
            reserved_metadata.checked(updated, self.limits, queue, stored)
        except errors.InvalidRequest as exc:
            raise errors.InvalidBody(exc.description) from exc
        before, after = QueuePolicy.of(stored), QueuePolicy.of(updated)
        self.encryption.for_queue(after)
        self.schedules.check_policy(project, queue, before, after)
        self._store(project, queue).set_metadata(project, queue, updated)
        return reserved_metadata.with_reserved_defaults(updated, self.limits, queue)

    def delete_queue(self, project: str, queue: str) -> None:
        """Delete the queue (or topic) and its schedules."""
        self.schedules.delete_all(project, queue)
        self._store(project, queue).delete_queue(project, queue)
        self.stores.forget(project, queue)

    def stats(self, project: str, queue: str) -> QueueStats:
        return self._store(project, queue).stats(project, queue, self.now_ms())

    def purge(self, project: str, queue: str, resource_types: Set[str]) -> None:
        """Purge what ``resource_types`` names ("messages", "subscriptions")."""
        store = self._store(project, queue)
        if "messages" in resource_types:
            store.purge(project, queue)
        if "subscriptions" in resource_types:
            store.purge_subscriptions(project, queue)

    # -- messages ------------------------------------------------------------------------------

    def post_messages(
        self,
        project: str,
        queue: str,
        payload: bytes,
        client_id: str,
        origin: PushOrigin = CLIENT_POST,
    ) -> Posted:
        """Validate and store a ``{"messages": [...]}`` post, all or nothing; returns the ids
        and which messages matched a remembered ``dedup_id`` (see ``Driver.post_messages``).
        Defaults and limits are the queue's when the messages are stored (``posting``).
        ``origin``: the push of this service that made the post, if one did
        (``posting.PushOrigin``; ``push_hops``)."""
        if not self.poster.knows(project, queue):
            # The post may create the queue (a queue this process posted to lately exists).
            self.quotas.check_new_queue(project, queue)
        now_ms, round_up = arrival(self.clock)
        posted, messages = self.poster.post(
            project, queue, payload, client_id, now_ms, round_up, origin
        )
        self._written(project, queue)
        self.lifecycle.posted(project, queue, posted, messages, now_ms)
        return posted

    def _written(self, project: str, queue: str) -> None:
        """Wake this process's waiting claims on a store that sends no wake-ups itself."""
        self.wait_rooms.of(self._store(project, queue)).written(project, queue)

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
        store = self._store(project, queue)
        list_page = store.list_messages
        if sort_by_due:
            if include_claimed:
                raise errors.InvalidRequest(
                    "sort=due lists messages no claim holds; it cannot include claimed ones."
                )
            list_page = store.list_messages_by_due
        listing = ListQuery(marker, limit, client_id, echo, include_claimed, include_delayed)
        page = list_page(project, queue, listing, self.now_ms())
        opened = self.encryption.open(page.messages, project, self._encrypts(project, queue))
        return ListPage(opened, page.next_marker)

    def _encrypts(self, project: str, queue: str) -> Callable[[], bool]:
        """Whether the queue encrypts its messages now, read from its metadata when asked
        (only a body sealed by an earlier release asks: such bodies open only there)."""

        def encrypts() -> bool:
            metadata = self._store(project, queue).get_metadata(project, queue)
            return QueuePolicy.of(metadata or {}).encrypt_messages

        return encrypts

    def get_messages(self, project: str, queue: str, ids: Sequence[str]) -> list[Message]:
        """Bulk GET: NotFound when none of the ids exists."""
        validation.message_limit(len(ids), self.limits)
        found = self._store(project, queue).get_messages(project, queue, ids, self.now_ms())
        if not found:
            raise errors.NotFound(
                f"No messages with IDs: {list(ids)!r} found in the queue {queue} for project "
                f"{project}."
            )
        return list(self.encryption.open(found, project, self._encrypts(project, queue)))

    def get_message(self, project: str, queue: str, message_id: str) -> Message:
        store, now_ms = self._store(project, queue), self.now_ms()
        found = store.get_messages(project, queue, [message_id], now_ms)
        if not found:
            raise errors.MessageDoesNotExist(message_id, queue, project)
        return self.encryption.open(found, project, self._encrypts(project, queue))[0]

    def delete_message(
        self, project: str, queue: str, message_id: str, claim_id: str | None
    ) -> None:
        now_ms, store = self.now_ms(), self._store(project, queue)
        deleted = store.delete_message(project, queue, message_id, claim_id, now_ms)
        removed = [message_id] if deleted else []
        self.lifecycle.deleted(project, queue, [message_id], removed, claim_id, now_ms)

    def edit_message(
        self,
        project: str,
        queue: str,
        message_id: str,
        claim_id: str | None,
        payload: bytes,
    ) -> None:
        """Edit one message (``{"body", "ttl", "delay" | "deliver_at"}``, any of them): the
        auditor's edit, and, with a new due time alone, a reschedule.

        Validated as a post is: the payload within the queue's post size limit, a ttl within
        the configured range (counted from the message's creation), a due time as a post's.
        A body is sealed when the queue encrypts its messages. A message that is claimed
        needs its claim id; a new due time then makes it leave the claim (a consumer's
        "retry later").
        """
        store = self._store(project, queue)
        metadata = store.get_metadata(project, queue)
        if metadata is None:
            raise errors.MessageDoesNotExist(message_id, queue, project)
        policy = QueuePolicy.of(metadata)
        self.poster.check_size(policy, len(payload))
        fields = validation.message_edit(jsondoc.loads(payload) if payload else None)
        now_ms, round_up = arrival(self.clock)
        edit = MessageEdit(
            message_id,
            claim_id,
            body_json=self._edited_body(fields, policy, project, queue),
            due_ms=self._edited_due(fields, now_ms, round_up),
            ttl_s=(
                validation.message_ttl(validation.integer_field(fields, "ttl", 0), self.limits)
                if "ttl" in fields
                else None
            ),
        )
        try:
            push_due_ms = store.edit_message(project, queue, edit, now_ms)
        except (errors.MessageIsClaimed, errors.ClaimNotValid) as exc:
            exc.title = "Unable to edit" if edit.due_ms is None else "Unable to reschedule"
            raise
        if edit.due_ms is not None:
            self._written(project, queue)
        self.lifecycle.pushes_owed(push_due_ms)
        if edit.body_json is None and edit.ttl_s is None:
            assert edit.due_ms is not None
            self.lifecycle.rescheduled(project, queue, edit, now_ms)
        else:
            self.lifecycle.edited(project, queue, edit, now_ms)

    def _edited_body(
        self, fields: Mapping[str, Any], policy: QueuePolicy, project: str, queue: str
    ) -> str | None:
        if "body" not in fields:
            return None
        body_json = jsondoc.dumps(validation.message_body(fields["body"]))
        cipher = self.encryption.for_queue(policy)
        return body_json if cipher is None else cipher.encrypt(body_json, project, queue)

    def _edited_due(self, fields: Mapping[str, Any], now_ms: int, round_up: int) -> int | None:
        if "delay" not in fields and "deliver_at" not in fields:
            return None
        return now_ms + validation.due_offset(fields, now_ms, self.limits, round_up)

    def delete_messages(
        self, project: str, queue: str, ids: list[str], claim_ids: list[str] | None
    ) -> None:
        validation.id_list(ids, self.limits)
        if self.limits.message_delete_with_claim_id and not claim_ids:
            raise errors.InvalidRequest(
                'The request should have both "ids" and "claim_ids" parameter in the request when '
                "message_delete_with_claim_id is True."
            )
        now_ms, deletion = self.now_ms(), Deletion(ids, claim_ids or None)
        removed = self._store(project, queue).delete_messages(project, queue, deletion, now_ms)
        self.lifecycle.deleted(project, queue, ids, removed, None, now_ms)

    def pop_messages(self, project: str, queue: str, count: int) -> list[Message]:
        validation.pop_count(count, self.limits)
        now_ms = self.now_ms()
        popped = self._store(project, queue).pop_messages(project, queue, count, now_ms)
        self.lifecycle.popped(project, queue, popped, now_ms)
        return list(self.encryption.open(popped, project, self._encrypts(project, queue)))

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
            store = self._store(project, queue)
            outcome = store.claim(project, queue, times, limit, now_ms)
            over = outcome.over_limit
            if over is not None and over.queue != queue:
                # A dead-letter queue placed nowhere is placed on this queue's pool first.
                self.stores.colocate(project, queue, over.queue)
                target = self.stores.for_queue(project, over.queue)
                dead_letters.move(store, project, queue, over, target, now_ms)
                self.lifecycle.dead_lettered(project, queue, over.ids, over.queue, now_ms)
            # A queue that is its own dead-letter queue (metadata no longer accepted) keeps
            # its messages claimed too often: moved to itself, each would be deleted.
            claim = outcome.claim
            if claim is None:
                return None
            self.lifecycle.claimed(project, queue, claim.id, claim.messages, now_ms)
            return self.encryption.open_claim(claim, project, self._encrypts(project, queue))

        if wait_s <= 0:
            return attempt()

        # With pools, a waiting claim places no queue (one placed now would stay on that pool
        # when created with a ``_flavor``); each attempt asks the queue's store then. Wake-ups
        # of a queue placed meanwhile go to its pool's room, not this one: the head polls.
        waits_on = self._store(project, queue)

        def next_claimable(now_ms: int) -> int | None:
            store = self._store(project, queue)
            if store is not waits_on or not self.stores.placed(project, queue):
                return now_ms + UNPLACED_RECHECK_MS
            return store.next_claimable_ms(project, queue, now_ms)

        room = self.wait_rooms.of(waits_on)
        return room.wait_for(project, queue, wait_s, attempt, next_claimable)

    def get_claim(self, project: str, queue: str, claim_id: str) -> Claim:
        return self.encryption.open_claim(
            self._store(project, queue).get_claim(project, queue, claim_id, self.now_ms()),
            project,
            self._encrypts(project, queue),
        )

    def renew_claim(self, project: str, queue: str, claim_id: str, times: ClaimTimes) -> None:
        store, now_ms = self._store(project, queue), self.now_ms()
        store.renew_claim(project, queue, claim_id, times.ttl_s, times.grace_s, now_ms)

    def release_claim(self, project: str, queue: str, claim_id: str) -> None:
        now_ms = self.now_ms()
        store = self._store(project, queue)
        held: tuple[Message, ...] = ()
        if self.lifecycle.wants_released_ids:
            with contextlib.suppress(errors.ClaimDoesNotExist):
                held = store.get_claim(project, queue, claim_id, now_ms).messages
        store.release_claim(project, queue, claim_id, now_ms)
        self._written(project, queue)
        self.lifecycle.released(project, queue, claim_id, [m.id for m in held], now_ms)
