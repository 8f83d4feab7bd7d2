"""Dedup ids on Swift: the first message posted with an id, remembered until it expires.

Each id has numbered generations, ``<p>/<q>/<sha1 of the id>/<g>`` in the dedup container,
each created only if absent. A post reads the latest generation: while it is unexpired the id
is a duplicate of its message; otherwise the post creates the next generation, and of
concurrent posts exactly one is kept (``SwiftClient.create_settled``).
"""

from __future__ import annotations

import json

from zaqar_delay import errors
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.connect import SwiftClient

# Generations a post tries to create while concurrent posts create them first.
REMEMBER_ATTEMPTS = 10


class SwiftDedup:
    """The dedup ids of every queue, in one container."""

    def __init__(self, swift: SwiftClient, container: str) -> None:
        self._swift = swift
        self._container = container

    def _prefix(self, project: str, queue: str, dedup_id: str) -> str:
        return f"{names.queue_prefix(project, queue)}{names.dedup_key(dedup_id)}/"

    def remember(
        self,
        project: str,
        queue: str,
        dedup_id: str,
        message_id: str,
        expires_ms: int,
        now_ms: int,
    ) -> tuple[str | None, str]:
        """``(id of the first message, "")`` when the queue remembers ``dedup_id``, else
        ``(None, generation object)`` after remembering ``message_id`` under it."""
        prefix = self._prefix(project, queue, dedup_id)
        listed = self._swift.listing(self._container, prefix)
        generation = int(listed[-1]["name"].rsplit("/", 1)[1]) if listed else 0
        for _ in range(REMEMBER_ATTEMPTS):
            if generation:
                found = self._swift.get(self._container, prefix + names.number_part(generation))
                if found is not None:
                    doc = json.loads(found[1])
                    if int(doc["e"]) > now_ms:
                        return str(doc["m"]), ""
            name = prefix + names.number_part(generation + 1)
            remembered = json.dumps({"m": message_id, "e": expires_ms}).encode()
            if self._swift.create_settled(self._container, name, remembered, names.CONTENT_TYPE):
                return None, name
            generation += 1  # a concurrent post created it: read what it remembers
        raise errors.StorageUnavailable("The dedup id could not be remembered.")

    def forget(self, generations: list[str]) -> None:
        """Forget what :meth:`remember` stored (a post that is refused after all)."""
        self._swift.each(lambda name: self._swift.delete(self._container, name), generations)
