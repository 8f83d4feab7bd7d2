"""The Redis implementation of the storage contract.

Every operation on a queue is one script call (see ``lua/``); only queue creation and deletion
also touch the project's queue index, which lives in another cluster slot.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
import threading
from collections.abc import Callable, Sequence
from typing import Any

import msgpack
import redis

from zaqar_delay import errors
from zaqar_delay.models import (
    Claim,
    ClaimOutcome,
    ListPage,
    Message,
    MessageRef,
    Metadata,
    NewMessage,
    Posted,
    QueueInfo,
    QueueStats,
)
from zaqar_delay.storage import markers
from zaqar_delay.storage.base import Driver, Wakeups
from zaqar_delay.storage.redis.errors import translate_errors
from zaqar_delay.storage.redis.keys import KeySpace

# Entries one listing call may examine before it returns a short page.
LIST_SCAN_BUDGET = 2000
# Queues whose metadata one driver remembers for posting (cleared when full).
METADATA_CACHE_SIZE = 10_000
# Posts retried when the metadata changes under them before the attempt that must succeed.
POST_ATTEMPTS = 4


@dataclasses.dataclass(frozen=True, slots=True)
class _KnownMetadata:
    """Metadata as a post last saw it, and the version (SHA-1) post.lua checks it against."""

    metadata: Metadata
    version: str

    @classmethod
    def from_raw(cls, raw: bytes | None) -> _KnownMetadata:
        if raw is None:
            return cls({}, "")
        return cls(dict(json.loads(raw)), hashlib.sha1(raw).hexdigest())


def _message(id_: bytes, body: bytes, raw_info: bytes, now_ms: int) -> Message:
    created, expires, ttl, due, client, _seq, claim, claim_expires, claim_count = msgpack.unpackb(
        raw_info
    )
    live_claim = claim if claim and claim_expires > now_ms else None
    return Message(
        id=id_.decode(),
        body=json.loads(body),
        ttl_s=int(ttl),
        created_ms=int(created),
        expires_ms=int(expires),
        due_ms=int(due),
        claim_id=live_claim,
        claim_count=int(claim_count),
        client_id=client,
    )


def _messages(flat: Sequence[bytes], now_ms: int) -> list[Message]:
    """Decode the ``id, body, info`` triples a script returns."""
    return [_message(flat[i], flat[i + 1], flat[i + 2], now_ms) for i in range(0, len(flat), 3)]


def _raise_claim_refusal(outcome: bytes) -> None:
    """Raise what a script's claim_check refusal (lua/lib.lua) means; "ok" passes."""
    if outcome == b"claimed":
        raise errors.MessageIsClaimed()
    if outcome == b"not_claimed":
        raise errors.ClaimNotValid(
            "A claim was specified, but the message is not currently claimed."
        )
    if outcome == b"bad_claim":
        raise errors.ClaimNotValid("The specified claim does not exist or has expired.")


class RedisDriver(Driver):
    """Stores queues in Redis (standalone, embedded or cluster) through ``client``."""

    def __init__(
        self, client: Any, prefix: str = "zd", list_scan_budget: int = LIST_SCAN_BUDGET
    ) -> None:
        from zaqar_delay.storage.redis.scripts import register_scripts

        self._client = client
        self._closed = threading.Event()
        self._list_scan_budget = list_scan_budget
        self._keys = KeySpace(prefix)
        self._scripts = register_scripts(client)
        self._known_metadata: dict[tuple[str, str], _KnownMetadata] = {}

    def _run(self, name: str, project: str, queue: str, *args: Any) -> Any:
        keys = self._keys.queue(project, queue).as_list()
        return self._scripts[name](keys=keys, args=list(args))

    # -- lifecycle -----------------------------------------------------------------------------

    def ping(self) -> bool:
        try:
            return bool(self._client.ping())
        except redis.RedisError:
            return False

    def close(self) -> None:
        self._closed.set()  # wake-up listeners stop with the driver
        self._client.close()

    def wakeups(self) -> Wakeups:
        from zaqar_delay.storage.redis.wakeups import RedisWakeups

        return RedisWakeups(self._client, self._keys, self._closed)

    # -- queues --------------------------------------------------------------------------------

    @translate_errors
    def create_queue(self, project: str, queue: str, metadata: Metadata, now_ms: int) -> bool:
        created = bool(self._run("queue", project, queue, "create", now_ms, json.dumps(metadata)))
        # Always (re)index: a crash between the two writes must not hide the queue forever.
        self._client.zadd(self._keys.project_queues(project), {queue: 0})
        return created

    @translate_errors
    def get_metadata(self, project: str, queue: str) -> Metadata | None:
        raw = self._client.hget(self._keys.queue(project, queue).queue, "m")
        return None if raw is None else dict(json.loads(raw))

    @translate_errors
    def set_metadata(self, project: str, queue: str, metadata: Metadata) -> None:
        if not self._run("queue", project, queue, "set", 0, json.dumps(metadata)):
            raise errors.QueueDoesNotExist(queue, project)

    @translate_errors
    def delete_queue(self, project: str, queue: str) -> None:
        self._client.zrem(self._keys.project_queues(project), queue)
        self._run("queue", project, queue, "delete", 0, "")

    @translate_errors
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
        pipe = self._client.pipeline(transaction=False)
        for name in names:
            pipe.hget(self._keys.queue(project, name).queue, "m")
        raws = pipe.execute()
        return [
            QueueInfo(name, dict(json.loads(raw)) if raw else {})
            for name, raw in zip(names, raws, strict=True)
        ]

    @translate_errors
    def count_queues(self, project: str) -> int:
        return int(self._client.zcard(self._keys.project_queues(project)))

    @translate_errors
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

    @translate_errors
    def purge(self, project: str, queue: str) -> None:
        self._run("queue", project, queue, "purge", 0, "")

    # -- messages ------------------------------------------------------------------------------

    @translate_errors
    def post_messages(
        self,
        project: str,
        queue: str,
        messages: Sequence[NewMessage],
        client_id: str,
        now_ms: int,
    ) -> Posted:
        return self._post(project, queue, messages, client_id, now_ms, ids=None)

    @translate_errors
    def post_built(
        self,
        project: str,
        queue: str,
        build: Callable[[Metadata], Sequence[NewMessage]],
        client_id: str,
        now_ms: int,
    ) -> Posted:
        """One script call per post: messages are built from the metadata this driver last
        saw, and post.lua stores them only if that is still the queue's metadata; otherwise
        it answers the current metadata and the post is rebuilt and sent again."""
        key = (project, queue)
        known = self._known_metadata.get(key)
        for _ in range(POST_ATTEMPTS):
            messages = build(known.metadata) if known else []
            expected = known.version if known else "?"  # "?" matches nothing: fetch first
            reply = self._post_checked(project, queue, messages, client_id, now_ms, expected)
            if isinstance(reply, _KnownMetadata):
                known = reply
                continue
            version, posted = reply
            assert known is not None  # a first attempt ("?") always comes back stale
            if len(self._known_metadata) >= METADATA_CACHE_SIZE:
                self._known_metadata.clear()
            self._known_metadata[key] = _KnownMetadata(known.metadata, version)
            return posted
        raise errors.StorageUnavailable(f"The metadata of queue {queue} kept changing")

    def _post(
        self,
        project: str,
        queue: str,
        messages: Sequence[NewMessage],
        client_id: str,
        now_ms: int,
        ids: Sequence[str] | None,
    ) -> Posted:
        reply = self._post_checked(project, queue, messages, client_id, now_ms, "*", ids)
        assert not isinstance(reply, _KnownMetadata)  # "*" skips the check
        return reply[1]

    def _post_checked(
        self,
        project: str,
        queue: str,
        messages: Sequence[NewMessage],
        client_id: str,
        now_ms: int,
        expected: str,
        ids: Sequence[str] | None = None,
    ) -> _KnownMetadata | tuple[str, Posted]:
        """Run post.lua; the current metadata when ``expected`` is stale, else (version, ids)."""
        mode = "new" if ids is None else "keep"
        if ids is None:
            random = secrets.token_hex(8 * len(messages))  # one draw for the whole post
            ids = [random[i * 16 : i * 16 + 16] for i in range(len(messages))]
        fields: list[Any] = []
        for ref, message in zip(ids, messages, strict=True):
            fields += (ref, message.ttl_s, message.delay_ms, message.body_json, message.dedup_id)
        packed = msgpack.packb(fields)
        created, *rest = self._run(
            "post", project, queue, now_ms, mode, client_id, expected, packed
        )
        if created == -1:
            return _KnownMetadata.from_raw(rest[0])
        if created:
            self._client.zadd(self._keys.project_queues(project), {queue: 0})
        version, joined, duplicates = rest
        posted = Posted(
            joined.decode().split(",") if joined else [],
            tuple(int(i) for i in duplicates.split(b",")) if duplicates else (),
        )
        return version.decode(), posted

    @translate_errors
    def list_messages(
        self,
        project: str,
        queue: str,
        *,
        marker: str | None,
        limit: int,
        client_id: str,
        echo: bool,
        include_claimed: bool,
        include_delayed: bool,
        now_ms: int,
    ) -> ListPage:
        after = markers.posting(marker)
        if isinstance(after, str):
            after = self._sequence_of(project, queue, after)
        cursor, more, *flat = self._run(
            "list",
            project,
            queue,
            now_ms,
            "" if after is None else after,
            limit,
            client_id,
            int(echo),
            int(include_claimed),
            int(include_delayed),
            self._list_scan_budget,
        )
        messages = tuple(_messages(flat, now_ms))
        next_marker = cursor.decode() if cursor and (messages or more) else None
        return ListPage(messages, next_marker)

    def _sequence_of(self, project: str, queue: str, message_id: str) -> int | None:
        """The posting sequence of a message named as a listing marker, None if unknown."""
        score = self._client.zscore(self._keys.queue(project, queue).fifo, message_id)
        return None if score is None else int(score)

    @translate_errors
    def list_messages_by_due(
        self,
        project: str,
        queue: str,
        *,
        marker: str | None,
        limit: int,
        client_id: str,
        echo: bool,
        include_delayed: bool,
        now_ms: int,
    ) -> ListPage:
        after = markers.due(marker)
        flat = self._run(
            "list_due",
            project,
            queue,
            now_ms,
            "" if after is None else after[0],
            "" if after is None else after[1],
            limit,
            client_id,
            int(echo),
            int(include_delayed),
        )
        messages = tuple(_messages(flat, now_ms))
        last = messages[-1] if messages else None
        return ListPage(messages, None if last is None else markers.make_due(last.due_ms, last.id))

    @translate_errors
    def get_messages(
        self, project: str, queue: str, ids: Sequence[str], now_ms: int
    ) -> list[Message]:
        if not ids:
            return []
        return _messages(self._run("get", project, queue, now_ms, *ids), now_ms)

    @translate_errors
    def delete_message(
        self, project: str, queue: str, message_id: str, claim_id: str | None, now_ms: int
    ) -> None:
        outcome = self._run("delete", project, queue, now_ms, message_id, claim_id or "")
        _raise_claim_refusal(outcome)

    @translate_errors
    def reschedule_message(
        self,
        project: str,
        queue: str,
        message_id: str,
        claim_id: str | None,
        due_ms: int,
        now_ms: int,
    ) -> None:
        outcome = self._run(
            "reschedule", project, queue, now_ms, message_id, claim_id or "", due_ms
        )
        if outcome == b"missing":
            raise errors.MessageDoesNotExist(message_id, queue, project)
        _raise_claim_refusal(outcome)

    @translate_errors
    def delete_messages(
        self,
        project: str,
        queue: str,
        ids: Sequence[str],
        claim_ids: Sequence[str] | None,
        now_ms: int,
    ) -> None:
        if not ids:
            return
        checked = claim_ids is not None
        claims = list(claim_ids or ())
        outcome = self._run(
            "delete_many", project, queue, now_ms, int(checked), len(claims), *claims, *ids
        )
        if outcome == b"claimed":
            raise errors.MessageIsClaimed()

    @translate_errors
    def pop_messages(self, project: str, queue: str, limit: int, now_ms: int) -> list[Message]:
        return _messages(self._run("pop", project, queue, now_ms, limit), now_ms)

    # -- claims --------------------------------------------------------------------------------

    @translate_errors
    def claim(
        self,
        project: str,
        queue: str,
        *,
        ttl_s: int,
        grace_s: int,
        limit: int,
        now_ms: int,
    ) -> ClaimOutcome:
        claim_id = secrets.token_hex(16)
        claimed, dead, dead_letter_queue, dead_letter_ttl = self._run(
            "claim", project, queue, now_ms, claim_id, ttl_s, grace_s, limit
        )
        moved: tuple[str, ...] = ()
        if dead:
            moved = self._move_to_dead_letter(
                project,
                queue,
                _messages(dead, now_ms),
                dead_letter_queue.decode(),
                int(dead_letter_ttl) or None,
                now_ms,
            )
        claim = None
        if claimed:
            expires_ms = now_ms + ttl_s * 1000
            messages = tuple(_messages(claimed, now_ms))
            claim = Claim(claim_id, ttl_s, grace_s, now_ms, expires_ms, messages)
        return ClaimOutcome(claim, moved, dead_letter_queue.decode() if moved else "")

    def _move_to_dead_letter(
        self,
        project: str,
        queue: str,
        messages: list[Message],
        target: str,
        ttl_s: int | None,
        now_ms: int,
    ) -> tuple[str, ...]:
        """Copy to the dead-letter queue first, then delete: a crash between repeats the move
        (the copy is idempotent by id) instead of losing the message. Returns the ids."""
        by_client: dict[str, list[Message]] = {}
        for message in messages:
            by_client.setdefault(message.client_id, []).append(message)
        for client_id, group in by_client.items():
            copies = [NewMessage(json.dumps(m.body), ttl_s or m.ttl_s, 0) for m in group]
            self._post(project, target, copies, client_id, now_ms, ids=[m.id for m in group])
        self._run("delete_many", project, queue, now_ms, 0, 0, *[m.id for m in messages])
        return tuple(m.id for m in messages)

    @translate_errors
    def next_claimable_ms(self, project: str, queue: str, now_ms: int) -> int | None:
        return int(self._run("next_claimable", project, queue, now_ms)) or None

    @translate_errors
    def get_claim(self, project: str, queue: str, claim_id: str, now_ms: int) -> Claim:
        found = self._run("get_claim", project, queue, now_ms, claim_id)
        if not found:
            raise errors.ClaimDoesNotExist(claim_id, queue, project)
        ttl, grace, updated, expires, flat = found
        return Claim(
            claim_id,
            int(ttl),
            int(grace),
            int(updated),
            int(expires),
            tuple(_messages(flat, now_ms)),
        )

    @translate_errors
    def renew_claim(
        self, project: str, queue: str, claim_id: str, ttl_s: int, grace_s: int, now_ms: int
    ) -> None:
        if not self._run("renew_claim", project, queue, now_ms, claim_id, ttl_s, grace_s):
            raise errors.ClaimDoesNotExist(claim_id, queue, project)

    @translate_errors
    def release_claim(self, project: str, queue: str, claim_id: str, now_ms: int) -> None:
        self._run("release_claim", project, queue, now_ms, claim_id)
