"""What a process of the Swift driver remembers between calls: facts that never change once
true (``Facts``), and each queue's metadata object as last read (``RecentQueueObjects``)."""

from __future__ import annotations

import collections
import threading
import time
from typing import Generic, TypeVar

# Facts this process has seen that never change, so reads look each one up once: posts of
# several messages committed, the slot a claim took of each of its messages, and how far each
# queue's messages are no longer claimable by their names.
FACTS_KEPT = 65_536

V = TypeVar("V")


class Facts(Generic[V]):
    """Facts by name that never change once true, the most recently learnt kept."""

    def __init__(self, kept: int = FACTS_KEPT) -> None:
        self._kept = kept
        self._known: collections.OrderedDict[str, V] = collections.OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, name: str) -> bool:
        with self._lock:
            return name in self._known

    def get(self, name: str) -> V | None:
        with self._lock:
            return self._known.get(name)

    def learn(self, name: str, fact: V) -> None:
        with self._lock:
            self._known[name] = fact
            if len(self._known) > self._kept:
                self._known.popitem(last=False)


QueueObject = tuple[str | None, bool]


class RecentQueueObjects:
    """Each queue's metadata object as this process last read it (see
    ``SwiftBase._queue_object``), usable until ``max_age_s`` after the read was sent: a read
    sent before a write ended may show what the write replaced, and expires by the time the
    write's caller answers (``SwiftBase._queue_object_written``)."""

    def __init__(self, max_age_s: float, kept: int = FACTS_KEPT) -> None:
        self.max_age_s = max_age_s
        self._kept = kept
        self._read: dict[str, tuple[float, QueueObject]] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> QueueObject | None:
        with self._lock:
            found = self._read.get(name)
        if found is None or found[0] + self.max_age_s <= time.monotonic():
            return None
        return found[1]

    def keep(self, name: str, sent_at: float, found: QueueObject) -> None:
        if self.max_age_s <= 0:
            return
        with self._lock:
            if len(self._read) >= self._kept:
                self._read.clear()
            self._read[name] = (sent_at, found)

    def forget(self, name: str) -> None:
        with self._lock:
            self._read.pop(name, None)
