"""Owed pushes on Redis: per queue, a sorted set of deliveries by next attempt (in the queue's
slot, written by post.lua and ``lua/push.lua``), and one sorted set of queues by their earliest
owed push (``KeySpace.pushes``, its own slot), through which dispatchers find due pushes in one
call.

The queue index cannot be written in the same script as the queue's keys on Redis Cluster, so
its score is kept at or before the queue's earliest owed push: a post, a settled retry and
an unparked push lower it (``LT``); after a lease, the dispatcher sets it to what the script
saw, then reads the queue's earliest push again and lowers it to that (``LT``). A post that
lowered it between the two is so never hidden. A push that ends leaves the score at most
too early, which costs one empty lease. Parked pushes (``lua/lib.lua``) are never owed.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from zaqar_delay.models import Delivery, LeaseRequest, Settlement
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.deliveries import PARKED
from zaqar_delay.storage.redis.errors import translate_class_errors
from zaqar_delay.storage.redis.keys import KeySpace
from zaqar_delay.storage.redis.layout import SETTLE_CONSUME, SETTLE_PLAIN, SETTLE_UNSENT
from zaqar_delay.storage.redis.replies import message_of, text
from zaqar_delay.storage.redis.subscriptions import subscription_of

# The index score of a queue that owes nothing now (kept rather than removed: see above).
NOTHING_OWED = 2**52


def queue_member(project: str, queue: str) -> str:
    return json.dumps([project, queue], separators=(",", ":"))


@translate_class_errors
class PushScripts(Driver):
    """The push operations of :class:`~zaqar_delay.storage.redis.driver.RedisDriver`."""

    if TYPE_CHECKING:
        _client: Any
        _keys: KeySpace
        _on_cluster: bool

        def _run(self, name: str, project: str, queue: str, *args: Any) -> Any: ...

        def _write(self, key: str, write: Callable[[Any], object]) -> None: ...

    def _lower_push_index(self, project: str, queue: str, due_ms: int) -> None:
        """After a post added pushes due at ``due_ms``."""
        # Kept with replica acks: losing it in a failover would hide the pushes the post owes.
        member = queue_member(project, queue)
        index = self._keys.pushes()
        self._write(index, lambda client: client.zadd(index, {member: due_ms}, lt=True))

    def _reindex_pushes(self, project: str, queue: str, earliest_ms: int) -> None:
        member = queue_member(project, queue)
        pushes = self._keys.pushes()
        deliveries = self._keys.queue(project, queue).deliveries
        first: Any  # [(member, score)] or []
        if self._on_cluster:
            # Two nodes: a pipeline would not keep the write before the read.
            self._client.zadd(pushes, {member: earliest_ms or NOTHING_OWED})
            first = self._client.zrange(deliveries, 0, 0, withscores=True)
        else:
            pipe = self._client.pipeline(transaction=False)
            pipe.zadd(pushes, {member: earliest_ms or NOTHING_OWED})
            pipe.zrange(deliveries, 0, 0, withscores=True)
            _, first = pipe.execute()
        # A post between the lease and the write lowered the index first: lower it again.
        if first and first[0][1] < PARKED and (not earliest_ms or first[0][1] < earliest_ms):
            self._client.zadd(pushes, {member: first[0][1]}, lt=True)

    def _forget_push_index(self, project: str, queue: str) -> None:
        self._client.zrem(self._keys.pushes(), queue_member(project, queue))

    def due_push_queues(self, now_ms: int, limit: int) -> list[tuple[str, str]]:
        members = self._client.zrangebyscore(self._keys.pushes(), "-inf", now_ms, 0, limit)
        return [(project, queue) for project, queue in map(json.loads, members)]

    def next_push_ms(self) -> int | None:
        first = self._client.zrange(self._keys.pushes(), 0, 0, withscores=True)
        if not first or first[0][1] >= PARKED:
            return None
        return int(first[0][1])

    def lease_pushes(self, project: str, queue: str, request: LeaseRequest) -> list[Delivery]:
        token = secrets.token_hex(8)
        earliest, metadata, *flat = self._run(
            "push",
            project,
            queue,
            "lease",
            request.now_ms,
            request.lease_ms,
            request.limit,
            token,
            request.until_ms,
        )
        self._reindex_pushes(project, queue, int(earliest))
        queue_metadata = json.loads(metadata) if metadata else {}
        leased = []
        for i in range(0, len(flat), 6):
            delivery_id, attempts, owed, raw_subscription, body, record = flat[i : i + 6]
            subscription_id, message_id = delivery_id.decode().split(":", 1)
            leased.append(
                Delivery(
                    id=delivery_id.decode(),
                    project=project,
                    queue=queue,
                    subscription=subscription_of(subscription_id, queue, raw_subscription),
                    message=message_of(message_id.encode(), body, record, b"", 0, request.now_ms),
                    attempts=int(attempts),
                    lease=token,
                    owed_ms=int(owed),
                    queue_metadata=queue_metadata,
                )
            )
        return leased

    def settle_pushes(
        self, project: str, queue: str, settlement: Settlement, now_ms: int
    ) -> list[str]:
        outcomes = settlement.outcomes
        if not outcomes:
            return []
        consumed, unsent = set(settlement.consume), set(settlement.unsent)
        attempts: list[Any] = []
        for delivery, retry_at in outcomes:
            kind = SETTLE_CONSUME if delivery.id in consumed else SETTLE_PLAIN
            kind = SETTLE_UNSENT if delivery.id in unsent else kind
            attempts += [delivery.id, delivery.lease, retry_at or 0, kind]
        _, unparked, consumed = self._run("push", project, queue, "settle", now_ms, *attempts)
        owed_again = [retry_at for _, retry_at in outcomes if retry_at is not None]
        owed_again += [int(unparked)] if unparked else []
        if owed_again:
            # The index may be later than a retry (the lease's end) or an unparked push (none
            # owed): lower it. A push that ended leaves the index at most too early, which the
            # next lease corrects.
            self._lower_push_index(project, queue, min(owed_again))
        return [text(mid) for mid in consumed]
