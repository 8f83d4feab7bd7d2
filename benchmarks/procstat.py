"""CPU time and memory of process trees, read from /proc (Linux)."""

from __future__ import annotations

import os

from testbed.processes import process_tree as tree

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds used so far by every process of every tree in ``pids``."""
    total = 0
    for root in pids:
        for pid in tree(root):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rpartition(")")[2].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


def context_switches(pids: list[int], descendants: bool = True) -> int:
    """Voluntary + involuntary context switches so far of every thread of every process in
    ``pids`` and, unless ``descendants`` is false, of their descendants (a process's own
    ``status`` counts only its main thread)."""
    total = 0
    for root in pids:
        for pid in tree(root) if descendants else [root]:
            try:
                threads = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in threads:
                try:
                    with open(f"/proc/{pid}/task/{tid}/status") as f:
                        total += sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
                except OSError:
                    continue
    return total


def rss_bytes(pid: int) -> int:
    """Resident memory of one process."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE
    except OSError:
        return 0
