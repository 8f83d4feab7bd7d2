"""Servers shared by the processes of one test run (pytest-xdist's workers).

A server that every worker would otherwise start for itself (a Swift all-in-one is five
Python servers, about 8 CPU-seconds to start) is started once: the first process that needs
it starts it and writes how to reach it, as a JSON record, into a directory the run's
controller made; the others wait on the same lock and read the record. The starter does not
stop what it started (other workers may still be using it): the controller does, once every
worker is done, from the records (see :meth:`SharedServers.records`).
"""

from __future__ import annotations

import fcntl
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

Record = dict[str, Any]


class SharedServers:
    """The servers shared through ``directory``, by name."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def get(self, name: str, start: Callable[[], Record]) -> Record:
        """The record of the server ``name``, started by ``start`` (which returns its record)
        if no process has started it yet. Concurrent callers wait for the first: one start.
        A start that fails writes no record, so the next caller tries again."""
        with self._locked(name):
            record = self._record_path(name)
            if record.exists():
                found: Record = json.loads(record.read_text())
                return found
            started = start()
            record.write_text(json.dumps(started))
            return started

    def records(self) -> Iterator[tuple[str, Record]]:
        """Every server started so far, as ``(name, record)``."""
        for path in sorted(self.directory.glob("*.json")):
            yield path.stem, json.loads(path.read_text())

    def _record_path(self, name: str) -> Path:
        return self.directory / f"{name}.json"

    @contextmanager
    def _locked(self, name: str) -> Iterator[None]:
        with open(self.directory / f"{name}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
