"""Temporary directories a server's master makes for its workers (their shared metrics, their
wake-up sockets): removed when the master exits, and by the next master to start when the
last one was killed.

A master holds an exclusive ``flock`` on a file in each directory it made, for as long as it
or a worker it forked lives (a worker inherits the descriptor). A directory whose lock a
starting master can take belongs to no living server, and that master removes it. A lock
rather than a process id: a master in another PID namespace that shares ``TMPDIR`` (a
container) holds its lock, where its process id would look dead.
"""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import stat
import tempfile

# The lock file, in each directory; a name that starts with a dot, which readers of the
# directory skip.
LOCK_NAME = ".master"

# Descriptors of this process's locks, by directory.
_held: dict[str, int] = {}


def make(prefix: str) -> str:
    """Make a private directory (mode 0700) in ``TMPDIR`` named ``prefix`` and a random suffix,
    locked for this process and its children, after removing the directories of ``prefix``
    that no living master holds. Raises OSError when it cannot be made."""
    remove_abandoned(prefix)
    directory = tempfile.mkdtemp(prefix=prefix)
    try:
        _held[directory] = _lock(directory)
    except OSError:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return directory


def remove(directory: str) -> None:
    """Remove a directory :func:`make` made, and release its lock."""
    shutil.rmtree(directory, ignore_errors=True)
    descriptor = _held.pop(directory, None)
    if descriptor is not None:
        os.close(descriptor)


def remove_abandoned(prefix: str) -> list[str]:
    """Remove this user's directories of ``prefix`` in ``TMPDIR`` whose master is gone, with
    its workers; returns them."""
    pattern = os.path.join(glob.escape(tempfile.gettempdir()), glob.escape(prefix) + "*")
    removed = [path for path in glob.glob(pattern) if _abandoned(path)]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def _lock(directory: str) -> int:
    # Locked under another name first: a starting master must never find the lock file of a
    # directory before its master holds the lock.
    locking = os.path.join(directory, ".locking")
    descriptor = os.open(locking, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        os.rename(locking, os.path.join(directory, LOCK_NAME))
    except OSError:
        os.close(descriptor)
        raise
    return descriptor


def _abandoned(path: str) -> bool:
    """Whether ``path`` is this user's directory (no link) holding a lock nobody holds. One
    without a lock file (being made, or another program's) is not."""
    try:
        status = os.lstat(path)
        if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.getuid():
            return False
        descriptor = os.open(os.path.join(path, LOCK_NAME), os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # its master, or a worker of it, lives
    finally:
        os.close(descriptor)
    return True
