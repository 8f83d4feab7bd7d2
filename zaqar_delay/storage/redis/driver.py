"""The Redis implementation of the storage contract.

Every operation on a queue is one script call (see ``lua/``); only queue creation and deletion
also touch the project's queue index, which lives in another cluster slot.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgpack
import redis

from zaqar_delay import errors
from zaqar_delay.models import (
    Batch,
    Deletion,
    ListPage,
    ListQuery,
    Message,
    MessageEdit,
    MessageRef,
    Metadata,
    NewMessage,
    OverLimit,
    Posted,
    QueueInfo,
    QueueStats,
    VersionedMetadata,
)
from zaqar_delay.storage import markers
from zaqar_delay.storage.base import ANY_METADATA_VERSION, metadata_version_of
from zaqar_delay.storage.bounds import LIST_SCAN_BUDGET
from zaqar_delay.storage.catalog import CatalogStore
from zaqar_delay.storage.redis import durability, layout, upgrade
from zaqar_delay.storage.redis.acks import ReplicaAcks, made_anyway, write_acked
from zaqar_delay.storage.redis.claims import ClaimScripts
from zaqar_delay.storage.redis.counting import MessageCounting
from zaqar_delay.storage.redis.errors import translate_class_errors, why_unreachable
from zaqar_delay.storage.redis.keys import KeySpace
from zaqar_delay.storage.redis.pushes import PushScripts
from zaqar_delay.storage.redis.removal import QueueRemoval
from zaqar_delay.storage.redis.replies import messages_of, raise_claim_refusal, removed_ids
from zaqar_delay.storage.redis.script_calls import run_many
from zaqar_delay.storage.redis.subscriptions import SubscriptionScripts
from zaqar_delay.storage.traits import Durability, Wakeups

# edit.lua's answers besides a claim refusal, as they arrive.
_EDIT_MISSING, _EDIT_TTL_LAPSED = layout.EDIT_MISSING.encode(), layout.EDIT_TTL_LAPSED.encode()


@translate_class_errors
class RedisDriver(ClaimScripts, SubscriptionScripts, PushScripts, MessageCounting):
    """Stores queues in Redis (standalone, embedded or cluster) through ``client``."""

    def __init__(
        self,
        client: Any,
        prefix: str = "zd",
        list_scan_budget: int = LIST_SCAN_BUDGET,
        acks: ReplicaAcks | None = None,
    ) -> None:
        """``acks``: how many replicas must confirm each write (``acks.py``); none by default."""
        from zaqar_delay.storage.redis.scripts import register_scripts

        self._client = client
        self._closed = threading.Event()
        self._list_scan_budget = list_scan_budget
        # A cluster client is not a redis.Redis (a RedisCluster, or the lazy stand-in for one).
        self._on_cluster = not isinstance(client, redis.Redis)
        self._keys = KeySpace(prefix, cluster=self._on_cluster)
        self._acks = acks or ReplicaAcks()
        self._scripts, self._script_connections = register_scripts(client, self._acks)
        self._removal = QueueRemoval(client, self._keys, self._run)

    def _write(self, key: str, write: Callable[[Any], object]) -> None:
        """Run the plain commands ``write`` issues on the client, all on ``key``, followed by
        WAIT when replica acks are required (``acks.write_acked``)."""
        if not self._acks.required:
            write(self._client)
            return
        write_acked(self._client, self._acks, key, write)

    def _run(self, name: str, project: str, queue: str, *args: Any) -> Any:
        return self._scripts[name](keys=self._keys.script_keys(project, queue), args=args)

    # -- lifecycle -----------------------------------------------------------------------------

    def unreachable_reason(self) -> str | None:
        # A lambda: a cluster client is built on first use, so even looking up ping may fail.
        return why_unreachable(lambda: self._client.ping())

    def clock_ms(self) -> int:
        seconds, micros = self._client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def prepare(self) -> list[str]:
        """Check what the store promises (``durability``: a store that evicts keys is
        refused), free what removals a stopped server left (``removal.py``), then move every
        queue still in the layout before buckets into them (``upgrade.py``)."""
        warnings = durability.check(self._client, self._acks.replicas)
        self._removal.finish_abandoned(0)
        upgraded = upgrade.upgrade_layout(self._client, self._keys, self._scripts["upgrade"])
        if upgraded:
            warnings.append(f"moved the messages of {upgraded} queue(s) into the bucket layout")
        return warnings

    def durability(self) -> Durability | None:
        return durability.describe(self._client, self._acks.replicas)

    def deployment_warnings(self) -> list[str]:
        return durability.check(self._client, self._acks.replicas)

    def pending_changes(self) -> list[str]:
        legacy = upgrade.queues_to_upgrade(self._client, self._keys)
        if not legacy:
            return []
        return [f"{legacy} queue(s) in the layout before buckets: moved at the next start"]

    def close(self) -> None:
        self._closed.set()  # wake-up listeners stop with the driver
        if self._script_connections is not None:
            self._script_connections.close()
        self._client.close()
        # A client given its pool leaves the pool's connections open on close(): an embedded
        # store would then see a client still connected and stay up after its last user.
        pool = getattr(self._client, "connection_pool", None)
        if pool is not None:
            pool.disconnect()

    def wakeups(self) -> Wakeups:
        from zaqar_delay.storage.redis.wakeups import RedisWakeups

        return RedisWakeups(self._client, self._keys, self._closed)

    def catalog(self) -> CatalogStore:
        from zaqar_delay.storage.redis.catalog import RedisCatalog

        return RedisCatalog(self._client, self._keys.prefix, self._acks)

    def holds_queues(self) -> bool:
        for _ in self._client.scan_iter(match=self._keys.project_queues_pattern(), count=1000):
            return True
        return False

    # -- queues --------------------------------------------------------------------------------

    def create_queue(self, project: str, queue: str, metadata: Metadata, now_ms: int) -> bool:
        created = bool(self._run("queue", project, queue, "create", now_ms, json.dumps(metadata)))
        # Always (re)index: a crash between the two writes must not hide the queue forever.
        self._index_queue(project, queue)
        return created

    def _index_queue(self, project: str, *queues: str) -> None:
        """List the queues in their project's index (another cluster slot than their own
        keys), in one write."""
        index = self._keys.project_queues(project)
        self._write(index, lambda client: client.zadd(index, dict.fromkeys(queues, 0)))

    def get_metadata(self, project: str, queue: str) -> Metadata | None:
        raw = self._client.hget(self._keys.queue(project, queue).queue, "m")
        return None if raw is None else dict(json.loads(raw))

    def get_metadata_many(self, project: str, queues: Sequence[str]) -> list[Metadata | None]:
        """One round trip (a pipeline; on a Cluster, one per node)."""
        pipe = self._client.pipeline(transaction=False)
        for queue in queues:
            pipe.hget(self._keys.queue(project, queue).queue, "m")
        return [None if raw is None else dict(json.loads(raw)) for raw in pipe.execute()]

    def set_metadata(self, project: str, queue: str, metadata: Metadata) -> None:
        if not self._run("queue", project, queue, "set", 0, json.dumps(metadata)):
            raise errors.QueueDoesNotExist(queue, project)

    def put_metadata_many(
        self, project: str, metadata: Mapping[str, Metadata], now_ms: int
    ) -> None:
        """Two round trips however many queues: their writes (queue.lua ``put``) in one packet
        (on a Cluster, one call each), then their index entries, as ``create_queue`` does."""
        if not metadata:
            return
        calls = [
            (self._keys.script_keys(project, queue), ("put", now_ms, json.dumps(one)))
            for queue, one in metadata.items()
        ]
        run_many(self._scripts["queue"], calls)
        self._index_queue(project, *metadata)

    def delete_queue(self, project: str, queue: str) -> None:
        index = self._keys.project_queues(project)
        self._write(index, lambda client: client.zrem(index, queue))
        self._removal.remove(project, queue, "delete")
        self._forget_push_index(project, queue)

    def list_queues(
        self, project: str, marker: str | None, limit: int, detailed: bool
    ) -> list[QueueInfo]:
        start = f"({marker}" if marker else "-"
        names = [
            n.decode()
            for n in self._client.zrangebylex(
                self._keys.project_queues(project), start, "+", start=0, num=limit
            )
        ]
        if not detailed:
            return [QueueInfo(name, None) for name in names]
        found = self.get_metadata_many(project, names)
        return [QueueInfo(name, one or {}) for name, one in zip(names, found, strict=True)]

    def count_queues(self, project: str) -> int:
        return int(self._client.zcard(self._keys.project_queues(project)))

    def stats(self, project: str, queue: str, now_ms: int) -> QueueStats:
        total, claimed, delayed, next_due, oldest, oldest_ms, newest, newest_ms, expired = (
            self._run("stats", project, queue, now_ms)
        )
        return QueueStats(
            total=int(total),
            claimed=int(claimed),
            delayed=int(delayed),
            next_due_ms=int(next_due) or None,
            expired=int(expired),
            oldest=MessageRef(oldest.decode(), int(oldest_ms)) if oldest else None,
            newest=MessageRef(newest.decode(), int(newest_ms)) if newest else None,
        )

    def purge(self, project: str, queue: str) -> None:
        self._removal.remove(project, queue, "purge")

    # -- messages ------------------------------------------------------------------------------

    def post_if_current(
        self, project: str, queue: str, batch: Batch, now_ms: int, metadata_version: str
    ) -> Posted | VersionedMetadata:
        """One script call: post.lua checks the version (the SHA-1 of the stored metadata
        JSON) and stores the messages, or answers the current metadata."""
        return self._post(project, queue, batch, now_ms, metadata_version)

    def receive_dead_letters(self, project: str, over: OverLimit, now_ms: int) -> None:
        # One post per client id, which a post stores once for all its messages.
        by_client: dict[str, list[tuple[Message, NewMessage]]] = {}
        for message, copy in zip(over.messages, over.copies(), strict=True):
            by_client.setdefault(message.client_id, []).append((message, copy))
        for client_id, group in by_client.items():
            batch = Batch([c for _, c in group], client_id)
            self._post_any(project, over.queue, batch, now_ms, ids=[m.id for m, _ in group])

    def _post_any(
        self, project: str, queue: str, batch: Batch, now_ms: int, ids: Sequence[str] = ()
    ) -> Posted:
        """A post whatever the queue's metadata is (``ANY_METADATA_VERSION``)."""
        reply = self._post(project, queue, batch, now_ms, ANY_METADATA_VERSION, ids)
        assert isinstance(reply, Posted)  # ANY_METADATA_VERSION skips the check
        return reply

    def _post(
        self,
        project: str,
        queue: str,
        batch: Batch,
        now_ms: int,
        expected: str,
        ids: Sequence[str] = (),
    ) -> Posted | VersionedMetadata:
        """Run post.lua; the current metadata when ``expected`` is stale. ``ids``: the
        messages' ids (new ones when empty)."""
        messages, client_id = batch.messages, batch.client_id
        mode = "keep" if ids else "new"
        if not ids:
            random = secrets.token_hex(8 * len(messages))  # one draw for the whole post
            ids = [random[i * 16 : i * 16 + 16] for i in range(len(messages))]
        fields: list[Any] = []
        for ref, message in zip(ids, messages, strict=True):
            fields += (
                ref,
                message.ttl_s,
                message.delay_ms,
                message.body_json,
                message.dedup_id,
                message.hops,
                message.dedup_memory_s,
            )
        # Not msgpack's 256 KiB first buffer, a mapping of its own per post (cmd/allocator.py):
        # a post's fields are most often a few hundred bytes, and the buffer grows as needed.
        packed = msgpack.packb(fields, buf_size=4096)
        created, *rest = self._run(
            "post", project, queue, now_ms, mode, client_id, expected, packed
        )
        if created == -1:
            raw = rest[0]
            if raw is None:
                return VersionedMetadata({}, metadata_version_of(None))
            return VersionedMetadata(dict(json.loads(raw)), metadata_version_of(raw))
        if created:
            self._index_queue(project, queue)
        version, joined, duplicates, push_due = rest
        if push_due:
            self._lower_push_index(project, queue, int(push_due))
        return Posted(
            joined.decode().split(",") if joined else [],
            tuple(int(i) for i in duplicates.split(b",")) if duplicates else (),
            version.decode(),
            int(push_due),
        )

    def list_messages(self, project: str, queue: str, listing: ListQuery, now_ms: int) -> ListPage:
        after = markers.posting(listing.marker)
        cursor, more, *flat = self._run(
            "list",
            project,
            queue,
            now_ms,
            after if isinstance(after, int) else "",
            after if isinstance(after, str) else "",
            listing.limit,
            listing.client_id,
            int(listing.echo),
            int(listing.include_claimed),
            int(listing.include_delayed),
            self._list_scan_budget,
        )
        messages = tuple(messages_of(flat, now_ms))
        next_marker = cursor.decode() if cursor and (messages or more) else None
        return ListPage(messages, next_marker)

    def list_messages_by_due(
        self, project: str, queue: str, listing: ListQuery, now_ms: int
    ) -> ListPage:
        after = markers.due(listing.marker)
        cursor, *flat = self._run(
            "list_due",
            project,
            queue,
            now_ms,
            "" if after is None else after[0],
            "" if after is None else after[1],
            listing.limit,
            listing.client_id,
            int(listing.echo),
            int(listing.include_delayed),
        )
        messages = tuple(messages_of(flat, now_ms))
        last = messages[-1] if messages else None
        return ListPage(
            messages, None if last is None else markers.make_due(last.due_ms, cursor.decode())
        )

    def get_messages(
        self, project: str, queue: str, ids: Sequence[str], now_ms: int
    ) -> list[Message]:
        if not ids:
            return []
        return messages_of(self._run("get", project, queue, now_ms, *ids), now_ms)

    def delete_message(
        self, project: str, queue: str, message_id: str, claim_id: str | None, now_ms: int
    ) -> bool:
        outcome = self._run("delete", project, queue, now_ms, message_id, claim_id or "")
        raise_claim_refusal(outcome)
        return bool(outcome == b"deleted")

    def edit_message(self, project: str, queue: str, edit: MessageEdit, now_ms: int) -> int:
        message_id, claim_id = edit.message_id, edit.claim_id
        # A field the edit keeps is sent as "".
        fields = (
            "" if value is None else value for value in (edit.body_json, edit.due_ms, edit.ttl_s)
        )
        outcome, push_due = self._run(
            "edit", project, queue, now_ms, message_id, claim_id or "", *fields
        )
        if outcome == _EDIT_MISSING:
            raise errors.MessageDoesNotExist(message_id, queue, project)
        if outcome == _EDIT_TTL_LAPSED:
            assert edit.ttl_s is not None  # only a new ttl can have lapsed
            raise errors.TtlAlreadyLapsed(edit.ttl_s)
        raise_claim_refusal(outcome)
        if push_due:
            self._lower_push_index(project, queue, int(push_due))
        return int(push_due)

    def delete_messages(
        self, project: str, queue: str, deletion: Deletion, now_ms: int
    ) -> list[str]:
        ids, claim_ids = deletion.ids, deletion.claim_ids
        if not ids:
            return []
        checked = claim_ids is not None
        claims = list(claim_ids or ())
        args = (now_ms, int(checked), len(claims), *claims, *ids)
        return removed_ids(self._run("delete_many", project, queue, *args))

    def pop_messages(self, project: str, queue: str, limit: int, now_ms: int) -> list[Message]:
        popped = made_anyway(lambda: self._run("pop", project, queue, now_ms, limit), "a pop")
        return messages_of(popped, now_ms)
