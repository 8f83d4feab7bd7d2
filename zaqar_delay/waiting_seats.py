"""The waiting claims each project holds in one server process (``[transport]
max_waiting_claims_per_project``), shared by every store's wait room."""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Iterator


class ProjectSeats:
    """How many claims of each project wait in this process, at most ``most`` (``[transport]
    max_waiting_claims_per_project``; 0: no limit). A waiting claim holds a connection of the
    server process for up to its wait, so without a bound one project's waiting claims could
    take every connection the process serves, and every other project's requests would wait
    behind them."""

    def __init__(self, most: int = 0) -> None:
        self.most = most
        self._lock = threading.Lock()
        self._held: collections.Counter[str] = collections.Counter()

    @contextlib.contextmanager
    def taken(self, project: str) -> Iterator[bool]:
        """Whether the project may have one more waiting claim, held for the block if so."""
        with self._lock:
            free = not self.most or self._held[project] < self.most
            if free:
                self._held[project] += 1
        try:
            yield free
        finally:
            if free:
                with self._lock:
                    self._held[project] -= 1
                    if not self._held[project]:
                        del self._held[project]
