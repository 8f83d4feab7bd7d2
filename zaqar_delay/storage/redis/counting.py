"""A project's message count on Redis (``Driver.count_messages``): its queue index read a page
of names at a time; each page's counters read in one pipeline, and the queues of the page that
hold expired messages counted again by ``lua/count.lua`` (which collects some of them first)
in one more round trip.

A queue counts the larger of its messages and its remembered dedup ids: an id is remembered
until the message first posted with it would expire, deleted or not, and takes the store's
memory until then (about 290 bytes), so posting with fresh ids and deleting at once does not
pass the quota. Which dedup ids a queue remembers is read here too, for the quota as well: a
post that only repeats remembered ids is let through at the limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgpack

from zaqar_delay import topics
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.redis.errors import translate_class_errors
from zaqar_delay.storage.redis.keys import KeySpace
from zaqar_delay.storage.redis.script_calls import run_many

#: Queues read in one round trip.
QUEUES_PER_CALL = 256


@translate_class_errors
class MessageCounting(Driver):
    """What the message quota reads of :class:`~zaqar_delay.storage.redis.driver.RedisDriver`:
    a project's message count, and whether a queue remembers a post's dedup ids."""

    if TYPE_CHECKING:
        _client: Any
        _keys: KeySpace
        _scripts: dict[str, Any]

    def count_messages(self, project: str, most: int, now_ms: int) -> int:
        """Each queue's ``n`` or its remembered dedup ids, the larger, stopped once ``most``
        is reached; the server's own queues, which sort last, are not read. Plain reads
        (three commands a queue) for a queue with no expired message; a script call, which
        collects up to 64 of its buckets of expired messages, for one with some."""
        index, start, counted = self._keys.project_queues(project), "-", 0
        end = f"({topics.INTERNAL}"
        while counted < most:
            names = [
                raw.decode()
                for raw in self._client.zrangebylex(index, start, end, 0, QUEUES_PER_CALL)
            ]
            counted += self._count_page(project, names, now_ms)
            if len(names) < QUEUES_PER_CALL:
                break
            start = f"({names[-1]}"
        return counted

    def remembers_dedup_ids(
        self, project: str, queue: str, dedup_ids: Sequence[str], now_ms: int
    ) -> bool:
        """One HMGET of the queue's remembered ids (a post script stores a message and its
        id together, so a remembered id's post is stored)."""
        wanted = list(dict.fromkeys(dedup_ids))
        if not wanted:
            return True
        found = self._client.hmget(self._keys.queue(project, queue).dedup, wanted)
        return all(raw is not None and int(msgpack.unpackb(raw)[1]) > now_ms for raw in found)

    def _count_page(self, project: str, names: list[str], now_ms: int) -> int:
        queues = [self._keys.passing_queue(project, name) for name in names]
        pipe = self._client.pipeline(transaction=False)
        for keys in queues:
            pipe.hget(keys.queue, "n")
            # A bucket whose earliest expiry has passed holds an expired message.
            pipe.zrangebyscore(keys.expiry, "-inf", now_ms, start=0, num=1)
            pipe.zcount(keys.dedup_expiry, f"({now_ms}", "+inf")
        replies = pipe.execute()
        counted, calls, remembered = 0, [], []
        for keys, stored, expired, ids in zip(
            queues, replies[::3], replies[1::3], replies[2::3], strict=True
        ):
            if expired:
                calls.append((keys.as_list(), (now_ms,)))
                remembered.append(int(ids))
            else:
                counted += max(int(stored or 0), int(ids))
        collected = run_many(self._scripts["count"], calls)
        return counted + sum(max(int(n), ids) for n, ids in zip(collected, remembered, strict=True))
