"""A project's message count on Redis (``Driver.count_messages``): its queue index read a page
of names at a time, and each page's queues counted by ``lua/count.lua`` in one round trip."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.redis.errors import translate_class_errors
from zaqar_delay.storage.redis.keys import KeySpace
from zaqar_delay.storage.redis.script_calls import run_many

#: Queues counted in one round trip (each call carries the queue's keys, about 1 KB).
QUEUES_PER_CALL = 256


@translate_class_errors
class MessageCounting(Driver):
    """The message count of :class:`~zaqar_delay.storage.redis.driver.RedisDriver`."""

    if TYPE_CHECKING:
        _client: Any
        _keys: KeySpace
        _scripts: dict[str, Any]

    def count_messages(self, project: str, most: int, now_ms: int) -> int:
        """Each queue's ``n`` after collecting some of its expired messages; a page of the
        project's queues per round trip, stopped once ``most`` is reached."""
        index, start, counted = self._keys.project_queues(project), "-", 0
        while counted < most:
            names = [
                raw.decode()
                for raw in self._client.zrangebylex(index, start, "+", 0, QUEUES_PER_CALL)
            ]
            calls = [(self._keys.passing_script_keys(project, name), (now_ms,)) for name in names]
            counted += sum(int(n) for n in run_many(self._scripts["count"], calls))
            if len(names) < QUEUES_PER_CALL:
                break
            start = f"({names[-1]}"
        return counted
