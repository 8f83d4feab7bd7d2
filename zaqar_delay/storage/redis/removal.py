"""Purging and deleting a queue on Redis without holding the store for long.

A queue of a million messages is some eight thousand buckets and indexes of a million entries.
Freeing them in the call that purges the queue held every other client of the store for about
half a second (and ten times that for ten million, past their socket timeout). ``queue.lua``
therefore makes the messages gone in one short call and leaves their storage in the queue's
trash, which ``sweep`` calls free a slice at a time (``lib.lua``'s ``free_trash``), so other
clients' calls run in between.

How a big index is freed depends on the store's allocator. With jemalloc (the Redis of
distributions and images) ``UNLINK`` hands it to a background thread and costs the store
nothing; with the C library's malloc (the embedded store's build) that thread holds the
allocator's lock as long as it frees, which stalls the store as much as freeing it in place.
So the index is unlinked on the former and taken apart in slices on the latter; a store whose
allocator cannot be read (``INFO`` refused to an ACL user) is taken for the latter.

A removal is listed in the store's removals index (``KeySpace.removals``) until its sweeps
are done. One whose server stopped before that is finished by the next server that starts
(``finish_abandoned`` from the driver's ``prepare``) or, once listed for
``ABANDONED_AFTER_S``, by the next removal on the store: the trash holds nothing a client can
see, only memory.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import redis

from zaqar_delay.storage.redis.durability import nodes_of
from zaqar_delay.storage.redis.keys import KeySpace
from zaqar_delay.storage.redis.layout import UNLINK_INDEXES
from zaqar_delay.storage.redis.pushes import queue_member


def frees_in_background(client: Any) -> bool:
    """Whether the store (a cluster: its first primary) allocates with jemalloc."""
    _, node = nodes_of(client)[0]
    try:
        allocator = node.info("memory").get("mem_allocator", "")
    except redis.ResponseError:  # INFO forbidden (an ACL without @dangerous)
        return False
    return str(allocator).startswith("jemalloc")


#: How long a removal stays listed before another server takes its sweeps for abandoned (a
#: removal of ten million messages sweeps for about ten seconds on the embedded store).
ABANDONED_AFTER_S = 60
#: Abandoned removals a removal finishes, at most, besides its own.
FINISHED_AT_ONCE = 10


class QueueRemoval:
    """Purges and deletes queues through ``run`` (the driver's script call), then frees what
    they left in the trash before it returns."""

    def __init__(self, client: Any, keys: KeySpace, run: Callable[..., Any]) -> None:
        self._client = client
        self._index = keys.removals()
        self._run = run
        self._indexes: str | None = None  # how big indexes go, once the store was asked

    def remove(self, project: str, queue: str, action: str) -> None:
        """``action`` ("purge" or "delete") the queue; its messages are gone when its script
        call returns, and its storage is free when this does."""
        member = queue_member(project, queue)
        self._client.zadd(self._index, {member: time.time()})
        left = self._run("queue", project, queue, action, 0, self._index_mode())
        self._sweep(member, left)
        self.finish_abandoned(ABANDONED_AFTER_S, FINISHED_AT_ONCE)

    def finish_abandoned(self, older_than_s: float, limit: int | None = None) -> int:
        """Sweep the trash of removals listed more than ``older_than_s`` ago (their server
        stopped before it was done); returns how many."""
        until = time.time() - older_than_s
        members = self._client.zrangebyscore(self._index, "-inf", until, 0, limit or -1)
        for member in members:
            self._sweep(member.decode(), 1)
        return len(members)

    def _sweep(self, member: str, left: int) -> None:
        project, queue = json.loads(member)
        while left:
            left = self._run("queue", project, queue, "sweep", 0, "")
        self._client.zrem(self._index, member)

    def _index_mode(self) -> str:
        if self._indexes is None:
            background = frees_in_background(self._client)
            self._indexes = UNLINK_INDEXES if background else ""
        return self._indexes
