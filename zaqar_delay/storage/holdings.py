"""What a project holds on a store, as the message quota counts it (``Driver.count_messages``):
written once for the stores that count in Python (MongoDB, Swift); Redis counts the same in
``storage/redis/counting.py``.

A queue holds the larger of its live messages and its remembered dedup ids. An id is
remembered until the message first posted with it would expire, deleted or not, and takes
the store's space until then: counting the ids too means posting with fresh ids and deleting
at once cannot pass the quota, while a message and its own id count once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


def per_queue(queues: Iterable[str], most: int) -> Counter[str]:
    """How many times each queue is named, reading no further than ``most`` names (a count
    may stop there: what a project holds is then at least ``most``)."""
    counted: Counter[str] = Counter()
    for seen, queue in enumerate(queues, start=1):
        counted[queue] += 1
        if seen >= most:
            break
    return counted


def held(messages: Counter[str], remembered: Counter[str]) -> int:
    """The messages a project holds: for each queue the larger of its live ``messages`` and
    its live ``remembered`` dedup ids."""
    return sum(max(messages[q], remembered[q]) for q in messages.keys() | remembered.keys())
