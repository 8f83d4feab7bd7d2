"""Sends run by a few threads, owners in turn and each owner's one at a time: one owner's
backlog cannot hold back another's.

A send may take its whole timeout (a receiver that never answers), and a client can ask for
sends faster than they end (subscribing again while unconfirmed sends another confirmation
request). With one FIFO queue, one project doing so delayed every other project's sends by
as many timeouts as it had queued. Here each owner has a queue of its own, runs one send at
a time, and the threads serve the owners round robin: with fewer owners sending than
threads, another owner's send starts at once, and otherwise after one send per owner ahead
of it at most. A send asked for again while the same one still waits is not queued twice,
and an owner may have at most ``per_owner`` waiting.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")

_Send = tuple[Hashable, Callable[[], T], "concurrent.futures.Future[T]"]


class FairSends(Generic[T]):
    """Sends by owner, run by ``threads`` threads, owners served in turn."""

    def __init__(self, threads: int, per_owner: int, name: str) -> None:
        self.per_owner = per_owner
        self._lock = threading.Condition()
        # Owners with sends waiting, in the order they are served; each one's in order.
        self._owners: collections.OrderedDict[str, collections.deque[_Send[T]]] = (
            collections.OrderedDict()
        )
        self._waiting: dict[Hashable, concurrent.futures.Future[T]] = {}
        self._running: set[str] = set()  # owners with a send running
        self._closed = False
        for n in range(threads):
            threading.Thread(target=self._serve, name=f"{name}-{n}", daemon=True).start()

    def submit(
        self, owner: str, key: Hashable, send: Callable[[], T]
    ) -> concurrent.futures.Future[T] | None:
        """Queue ``send`` for ``owner``: the future of its result; that of the send of the
        same ``key`` still waiting, if one is; None (nothing queued) when the owner has
        ``per_owner`` sends waiting, or the sends are closed."""
        with self._lock:
            queued = self._waiting.get(key)
            if queued is not None:
                return queued
            line = self._owners.get(owner)
            if self._closed or (line is not None and len(line) >= self.per_owner):
                return None
            future: concurrent.futures.Future[T] = concurrent.futures.Future()
            self._owners.setdefault(owner, collections.deque()).append((key, send, future))
            self._waiting[key] = future
            self._lock.notify()
            return future

    def waiting(self, owner: str) -> int:
        """How many sends of ``owner`` wait (not those running)."""
        with self._lock:
            return len(self._owners.get(owner, ()))

    def close(self) -> None:
        """Run no more sends; those waiting are cancelled."""
        with self._lock:
            self._closed = True
            lines, self._owners = list(self._owners.values()), collections.OrderedDict()
            self._waiting.clear()
            self._lock.notify_all()
        for line in lines:
            for _, _, future in line:
                future.cancel()

    def _next_owner(self) -> str | None:
        """Under the lock: the first owner in turn with a send waiting and none running."""
        return next((owner for owner in self._owners if owner not in self._running), None)

    def _serve(self) -> None:
        while True:
            with self._lock:
                while (owner := self._next_owner()) is None and not self._closed:
                    self._lock.wait()
                if owner is None:
                    return  # closed
                line = self._owners.pop(owner)
                key, send, future = line.popleft()
                if line:  # its next send after every other owner's
                    self._owners[owner] = line
                del self._waiting[key]
                self._running.add(owner)
            try:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(send())
                    except BaseException as exc:  # noqa: BLE001 - the future carries it
                        future.set_exception(exc)
            finally:
                with self._lock:
                    self._running.discard(owner)
                    self._lock.notify_all()  # that owner's next send may start now
