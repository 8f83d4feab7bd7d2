"""A project's message count on Redis (``Driver.count_messages``): its queue index read a page
of names at a time; each page's counters read in one pipeline, and the queues of the page that
hold expired messages counted again by ``lua/count.lua`` (which collects some of them first)
in one more round trip."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.redis.errors import translate_class_errors
from zaqar_delay.storage.redis.keys import KeySpace
from zaqar_delay.storage.redis.script_calls import run_many

#: Queues read in one round trip.
QUEUES_PER_CALL = 256


@translate_class_errors
class MessageCounting(Driver):
    """The message count of :class:`~zaqar_delay.storage.redis.driver.RedisDriver`."""

    if TYPE_CHECKING:
        _client: Any
        _keys: KeySpace
        _scripts: dict[str, Any]

    def count_messages(self, project: str, most: int, now_ms: int) -> int:
        """Each queue's ``n``, stopped once ``most`` is reached. Plain reads (two commands a
        queue) for a queue with no expired message; a script call, which collects up to 64
        of its buckets of expired messages, for one with some."""
        index, start, counted = self._keys.project_queues(project), "-", 0
        while counted < most:
            names = [
                raw.decode()
                for raw in self._client.zrangebylex(index, start, "+", 0, QUEUES_PER_CALL)
            ]
            counted += self._count_page(project, names, now_ms)
            if len(names) < QUEUES_PER_CALL:
                break
            start = f"({names[-1]}"
        return counted

    def _count_page(self, project: str, names: list[str], now_ms: int) -> int:
        queues = [self._keys.passing_queue(project, name) for name in names]
        pipe = self._client.pipeline(transaction=False)
        for keys in queues:
            pipe.hget(keys.queue, "n")
            # A bucket whose earliest expiry has passed holds an expired message.
            pipe.zrangebyscore(keys.expiry, "-inf", now_ms, start=0, num=1)
        replies = pipe.execute()
        counted, calls = 0, []
        for keys, stored, expired in zip(queues, replies[::2], replies[1::2], strict=True):
            if expired:
                calls.append((keys.as_list(), (now_ms,)))
            else:
                counted += int(stored or 0)
        return counted + sum(int(n) for n in run_many(self._scripts["count"], calls))
