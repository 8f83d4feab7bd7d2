"""How much of the lifecycle journal is kept (``[journal] max_total_size``).

Every server process writes its own series of files (``journal-<host>-<pid>-<start
ms>-<n>.jsonl``, ``journal.py``), and a series' newest file may be the one its process is
writing. When a process begins a new file, it deletes the oldest files no process writes
any more until the directory's files fit the limit: every file of a series but its newest,
and the whole series of a process of this host that is gone. The newest file of a live
process, or of one on another host (which cannot be told apart from a live one), is kept
whatever its age; so the directory may hold that much beyond the limit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re

from zaqar_delay.processes import alive


def file_name(host: str, pid: int, started_ms: int, number: int) -> str:
    """The name of file ``number`` of the series a process (``host``, ``pid``) began at
    ``started_ms``."""
    return f"journal-{host}-{pid}-{started_ms}-{number:05d}.jsonl"


#: A journal file's name (:func:`file_name`): its series (host, pid, start), its number.
JOURNAL_FILE = re.compile(r"^journal-(?P<host>.+)-(?P<pid>\d+)-(?P<start>\d+)-(?P<n>\d+)\.jsonl$")


@dataclasses.dataclass(frozen=True)
class JournalFile:
    path: str
    series: tuple[str, int, int]  # host, pid, start ms
    number: int
    size: int
    modified: float


def journal_files(directory: str) -> list[JournalFile]:
    """The journal files in ``directory`` (one deleted meanwhile is left out)."""
    found = []
    for entry in os.scandir(directory):
        match = JOURNAL_FILE.match(entry.name)
        if match is None:
            continue
        with contextlib.suppress(FileNotFoundError):
            stat = entry.stat()
            series = (match["host"], int(match["pid"]), int(match["start"]))
            found.append(
                JournalFile(entry.path, series, int(match["n"]), stat.st_size, stat.st_mtime)
            )
    return found


def prune(directory: str, max_total: int, host: str) -> list[str]:
    """Delete the oldest files no process writes any more until the files of ``directory``
    take at most ``max_total`` bytes (or no such file is left); returns those deleted.
    ``host``: this machine's name, whose processes can be told alive or gone."""
    files = journal_files(directory)
    total = sum(f.size for f in files)
    if total <= max_total:
        return []
    newest: dict[tuple[str, int, int], int] = {}
    for f in files:
        newest[f.series] = max(newest.get(f.series, 0), f.number)
    closed = [
        f
        for f in files
        if f.number < newest[f.series] or (f.series[0] == host and not alive(f.series[1]))
    ]
    deleted = []
    for f in sorted(closed, key=lambda f: (f.modified, f.number)):
        if total <= max_total:
            break
        with contextlib.suppress(FileNotFoundError):  # another process pruned it first
            os.unlink(f.path)
            deleted.append(f.path)
        total -= f.size
    return deleted
