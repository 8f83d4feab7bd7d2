"""Dedup ids on Swift: the first message posted with an id, remembered until it expires.

Each id has numbered generations, ``<p>/<q>/<sha1 of the id>/<g>`` in the dedup container,
each created only if absent. A post reads the latest generation: while it is unexpired the id
is a duplicate of its message; otherwise the post creates the next generation, and of
concurrent posts exactly one is kept (``SwiftClient.create_settled``).

A generation is created unconfirmed (``s`` 0) before its message is stored, and confirmed
once the post is stored whole (its messages and the pushes owed for them). A repeat that
meets an unconfirmed one waits for it to be confirmed until ``FIRST_POST_GRACE_MS`` after it
was made. Unconfirmed then, its post failed part-way without undoing it (Swift went away in
between, or the process died): if its message is stored, the repeat completes the post (owes
the pushes it may not have owed) and confirms the generation; if not, the id is remembered
afresh. So a repeat is never answered with the id of a message that was never stored, nor of
one never pushed. A post of several ids that meets one being stored gives back the ids it
took and takes them again one at a time in ``dedup_key`` order, waiting where it must: posts
wait only in that order, so none waits on a post that waits on it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from zaqar_delay import errors
from zaqar_delay.storage.bounds import FIRST_POST_GRACE_MS, FIRST_POST_POLL_S
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
        complete: Callable[[str], bool],
        wait: bool = True,
    ) -> tuple[str | None, str]:
        """``(id of the first message, "")`` when the queue remembers ``dedup_id``, else
        ``(None, generation object)`` after remembering ``message_id`` under it, unconfirmed
        until :meth:`confirm`. ``complete(id)``: whether a message is stored, once the pushes
        its post may not have owed are owed (asked of an unconfirmed generation's message
        when its post's time is up). When the first message is still being stored, this
        waits for it, or with ``wait`` False answers ``(None, "")`` at once."""
        prefix = self._prefix(project, queue, dedup_id)
        listed = self._swift.listing(self._container, prefix)
        generation = int(listed[-1]["name"].rsplit("/", 1)[1]) if listed else 0
        for _ in range(REMEMBER_ATTEMPTS):
            if generation:
                found = self._swift.get(self._container, prefix + names.number_part(generation))
                if found is not None:
                    doc = json.loads(found[1])
                    if int(doc["e"]) > now_ms:
                        first = self._first_post_stored(
                            prefix + names.number_part(generation), doc, complete, now_ms, wait
                        )
                        if first is None:
                            return None, ""
                        if first:
                            return first, ""
            name = prefix + names.number_part(generation + 1)
            if self._swift.create_settled(
                self._container,
                name,
                _record(message_id, expires_ms, now_ms, confirmed=False),
                names.CONTENT_TYPE,
            ):
                return None, name
            generation += 1  # a concurrent post created it: read what it remembers
        raise errors.StorageUnavailable("The dedup id could not be remembered.")

    def _first_post_stored(
        self,
        name: str,
        doc: dict[str, Any],
        complete: Callable[[str], bool],
        now_ms: int,
        wait: bool,
    ) -> str | None:
        """The id of the message the unexpired generation ``name`` (read as ``doc``)
        remembers, once the post that made it stored it, waiting for it while that post may
        still be storing it (without ``wait``: None then); "" when it did not. The id is the
        one the generation holds when confirmed, which is the one read last. Past that time
        an unconfirmed generation's message, if stored, is completed and the generation
        confirmed. A generation of an earlier release, without ``s``, was stored."""
        deadline = time.monotonic() + (FIRST_POST_GRACE_MS - (now_ms - int(doc["at"]))) / 1000
        while not doc.get("s", 1):
            if time.monotonic() >= deadline:
                if not complete(str(doc["m"])):
                    return ""
                self.confirm([(name, str(doc["m"]), int(doc["e"]), int(doc["at"]))])
                return str(doc["m"])
            if not wait:
                return None
            time.sleep(FIRST_POST_POLL_S)
            found = self._swift.get(self._container, name)
            doc = {"e": 0} if found is None else json.loads(found[1])
            if int(doc["e"]) <= now_ms:
                return ""  # its post failed, and forgot it
        return str(doc["m"])

    def confirm(self, generations: Sequence[tuple[str, str, int, int]]) -> None:
        """Confirm the generations ``(name, message id, expires ms, created ms)`` that
        :meth:`remember` made, once their messages are stored."""
        self._swift.each(
            lambda item: self._swift.put(
                self._container,
                item[0],
                _record(item[1], item[2], item[3], confirmed=True),
                names.CONTENT_TYPE,
            ),
            generations,
        )

    def forget(self, generations: list[str]) -> None:
        """Forget what :meth:`remember` stored (a post that is refused after all, or that
        gives its ids back): each generation is overwritten as lapsed, not deleted, so its
        number is never taken again while a later one may be live."""
        self._swift.each(
            lambda name: self._swift.put(self._container, name, LAPSED, names.CONTENT_TYPE),
            generations,
        )


def _record(message_id: str, expires_ms: int, now_ms: int, *, confirmed: bool) -> bytes:
    """A generation's body: the message, when it expires (so does the generation), when the
    generation was made, and whether the message is known to be stored. Unique to the
    call: ``create_settled`` compares bodies."""
    return json.dumps(
        {"m": message_id, "e": expires_ms, "at": now_ms, "s": int(confirmed)}
    ).encode()


# A generation forgotten: expired, so the next post with its id makes the next one.
LAPSED = _record("", 0, 0, confirmed=True)
