"""What the embedded redis-server is configured with (``embedded.py`` writes its
``redis.conf`` at each start): the settings that make it a durable store, and the memory it
may hold (``[storage] embedded_max_memory``).

A Redis without ``maxmemory`` takes whatever it is sent until the kernel kills it or the
machine swaps: one project posting without end would take the memory of the server's own
workers and of everything else on the host, and a store killed that way loads the same
files again at its restart. With a limit (and ``noeviction``, the only policy that loses
nothing) the store refuses new data once full: posts answer 503 "The message store is full"
(``errors.StoreFull``) while claims, deletes and expiry go on and make room again.
"""

from __future__ import annotations

import os

from zaqar_delay.storage.redis.store_files import AOF_FILE

# appendfsync (``[storage] embedded_appendfsync``): "always" fsyncs before Redis answers, so
# nothing acknowledged is lost; with "everysec" Redis postpones writing the file while a slow
# fsync runs, up to two seconds, and a killed store loses what it answered meanwhile.
# aof-load-truncated: a power cut that leaves half a record at the end costs that record, not
# the start of the store.
# save "": no RDB snapshots. The append-only file is the store's record; snapshots would only
# add disk writes, and a failed one (a full disk) would stop writes on its own.
SERVER_CONFIG = {
    "appendonly": "yes",
    "appendfilename": AOF_FILE,
    "save": '""',
    "stop-writes-on-bgsave-error": "no",
    "aof-load-truncated": "yes",
    "daemonize": "no",
}

MIB = 1 << 20

#: The share of the machine's memory the store may hold when ``embedded_max_memory`` is not
#: set: a rewrite of the append-only file forks the store, whose copy-on-write pages may
#: take as much again while writes go on, and the server's workers need room too.
DEFAULT_SHARE = 0.5

#: Where Linux tells a process's memory limit (cgroup v2, then v1): in a container the
#: machine's memory is not what the store may use.
CGROUP_LIMITS = (
    "/sys/fs/cgroup/memory.max",
    "/sys/fs/cgroup/memory/memory.limit_in_bytes",
)


def machine_memory_bytes(cgroup_limits: tuple[str, ...] = CGROUP_LIMITS) -> int:
    """The memory this process may use: the machine's, or its control group's limit if
    lower."""
    most = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for path in cgroup_limits:
        try:
            with open(path) as f:
                limit = f.read().strip()
        except OSError:
            continue
        if limit.isdigit():
            most = min(most, int(limit))
    return most


def max_memory_bytes(setting_mib: int | None) -> int:
    """``maxmemory`` for ``[storage] embedded_max_memory``: that many MiB, 0 for no limit,
    and ``DEFAULT_SHARE`` of :func:`machine_memory_bytes` when it is not set."""
    if setting_mib is None:
        return int(machine_memory_bytes() * DEFAULT_SHARE)
    return setting_mib * MIB


def memory_config(max_memory: int) -> dict[str, str]:
    """The ``redis.conf`` lines that hold the store to ``max_memory`` bytes (0: none)."""
    return {"maxmemory": str(max_memory), "maxmemory-policy": "noeviction"}
