"""The lifecycle journal kept within ``[journal] max_total_size`` (``journal_retention.py``):
the oldest files no process writes any more go first, and no file a process may be writing
goes at all."""

from __future__ import annotations

import glob
import os
import pathlib
import socket
import subprocess

from zaqar_delay.journal import Journal


def journal_file(directory: pathlib.Path, host: str, pid: int, n: int, age_s: int) -> pathlib.Path:
    """A file of another process's series, of 3,000 bytes, written ``age_s`` seconds ago."""
    path = directory / f"journal-{host}-{pid}-1700000000000-{n:05d}.jsonl"
    path.write_text('{"ts":1,"event":"posted"}\n' * 115)  # 3,000 bytes
    modified = 1_800_000_000 - age_s
    os.utime(path, (modified, modified))
    return path


def test_the_oldest_closed_files_go_first_and_none_a_process_may_write(
    tmp_path: pathlib.Path,
) -> None:
    host = socket.gethostname()
    gone = subprocess.Popen(["true"])
    gone.wait()
    live = os.getppid()
    # A gone process of this host: all its files are closed, its newest too.
    of_gone = journal_file(tmp_path, host, gone.pid, 1, age_s=100)
    # A live process of this host: its older file is closed, its newest it may be writing.
    live_older = journal_file(tmp_path, host, live, 1, age_s=300)
    live_newest = journal_file(tmp_path, host, live, 2, age_s=400)
    # A process of another host cannot be told gone: its newest file is kept.
    elsewhere = journal_file(tmp_path, "elsewhere", 1, 1, age_s=500)

    journal = Journal(str(tmp_path), max_bytes=1000, max_total=6000)
    for i in range(60):
        journal.write([{"ts": i, "event": "posted", "pad": "x" * 40}])
    journal.close()

    assert not live_older.exists() and not of_gone.exists()
    assert live_newest.exists() and elsewhere.exists()
    own = sorted(glob.glob(str(tmp_path / f"journal-{host}-{os.getpid()}-*.jsonl")))
    numbers = [int(path[-11:-6]) for path in own]
    assert numbers and numbers[0] > 1, "this process's own older files went too"
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), "the newest kept"
    total = sum(os.path.getsize(p) for p in glob.glob(str(tmp_path / "*.jsonl")))
    assert total <= 6000 + 1000 + 100  # the limit, and the file being written


def test_nothing_is_deleted_without_a_limit(tmp_path: pathlib.Path) -> None:
    old = journal_file(tmp_path, socket.gethostname(), 1, 1, age_s=10_000)
    journal = Journal(str(tmp_path), max_bytes=1000)
    for i in range(60):
        journal.write([{"ts": i, "event": "posted", "pad": "x" * 40}])
    journal.close()
    assert old.exists()
    assert len(glob.glob(str(tmp_path / "*.jsonl"))) > 5
