"""Whether a process of this machine runs, as the kernel tells it."""

from __future__ import annotations

import errno
import os


def alive(pid: int | None) -> bool:
    """Whether the process ``pid`` runs (a zombie does not; another user's does)."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    # A zombie is dead though it has a pid: /proc says so.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
