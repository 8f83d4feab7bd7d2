"""The directories a server's master makes for its workers: a master killed with SIGKILL
leaves its own behind, and the next master to start removes them, but never one whose master
or a worker of it still lives, one another program made, or what a link points to."""

from __future__ import annotations

import multiprocessing
import os
import pathlib
import signal
import tempfile
import time

import pytest

from testbed.processes import is_gone, wait_gone, wait_until
from zaqar_delay import master_directories

FORK = multiprocessing.get_context("fork")
PREFIX = "zaqar-delay-test-"


@pytest.fixture(autouse=True)
def temporary_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> str:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return str(tmp_path)


def master(made: multiprocessing.Queue, with_worker: bool) -> None:
    """A master that makes its directory (and forks a worker that outlives it), then waits to
    be killed."""
    directory = master_directories.make(PREFIX)
    worker = os.fork() if with_worker else None
    if worker == 0:
        time.sleep(600)
        os._exit(0)
    made.put((directory, worker))
    time.sleep(600)


def start_master(with_worker: bool = False) -> tuple[multiprocessing.Process, str, int | None]:
    made: multiprocessing.Queue = FORK.Queue()
    process = FORK.Process(target=master, args=(made, with_worker), daemon=True)
    process.start()
    directory, worker = made.get(timeout=30)
    return process, directory, worker


def kill(process: multiprocessing.Process) -> None:
    assert process.pid is not None
    os.kill(process.pid, signal.SIGKILL)
    # Not join(): a worker it forked holds the pipe join() waits to see closed.
    wait_until(lambda: process.exitcode is not None, 10, "the killed master")
    assert process.exitcode == -signal.SIGKILL


def test_a_killed_masters_directory_is_removed_by_the_next_master() -> None:
    process, left, _ = start_master()
    kill(process)
    assert os.path.isdir(left)  # left behind: nobody ran the master's exit
    made = master_directories.make(PREFIX)
    assert not os.path.exists(left)
    assert os.path.isdir(made) and os.stat(made).st_mode & 0o777 == 0o700
    master_directories.remove(made)
    assert not os.path.exists(made)


def test_a_living_masters_directory_is_kept() -> None:
    process, living, _ = start_master()
    try:
        made = master_directories.make(PREFIX)
        assert os.path.isdir(living) and os.path.isdir(made)
        # Nor is the new one taken for abandoned, by this process or another.
        assert master_directories.remove_abandoned(PREFIX) == []
    finally:
        kill(process)
    assert master_directories.remove_abandoned(PREFIX) == [living]
    master_directories.remove(made)


def test_a_directory_is_kept_while_a_worker_outlives_its_master() -> None:
    process, directory, worker = start_master(with_worker=True)
    assert worker is not None
    try:
        kill(process)
        assert not is_gone(worker)
        assert master_directories.remove_abandoned(PREFIX) == []
        assert os.path.isdir(directory)
    finally:
        os.kill(worker, signal.SIGKILL)
    wait_gone([worker])
    assert master_directories.remove_abandoned(PREFIX) == [directory]
    assert not os.path.exists(directory)


def test_what_holds_no_lock_file_and_links_are_kept(temporary_directory: str) -> None:
    unlocked = os.path.join(temporary_directory, PREFIX + "another-program")
    os.mkdir(unlocked)
    process, elsewhere, _ = start_master()
    kill(process)
    # An abandoned directory reached through a link is not the link's to remove.
    hidden = os.path.join(temporary_directory, "elsewhere")
    os.rename(elsewhere, hidden)
    link = os.path.join(temporary_directory, PREFIX + "link")
    os.symlink(hidden, link)
    assert master_directories.remove_abandoned(PREFIX) == []
    assert os.path.isdir(unlocked) and os.path.islink(link)
    assert os.path.exists(os.path.join(hidden, master_directories.LOCK_NAME))


def test_a_directory_that_cannot_be_made_raises(temporary_directory: str) -> None:
    tempfile.tempdir = os.path.join(temporary_directory, "missing")
    with pytest.raises(OSError):
        master_directories.make(PREFIX)
