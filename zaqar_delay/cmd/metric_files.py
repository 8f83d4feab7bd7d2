"""A worker's shared metric files, made whole before the worker serves.

prometheus-client's multiprocess mode keeps each worker's values in files it maps into
memory (``counter_<pid>.db`` and ``histogram_<pid>.db`` in the metrics directory, under
``TMPDIR`` unless ``PROMETHEUS_MULTIPROC_DIR`` names one). It creates them sparse and writes
them through the mapping, so on a full disk a page the kernel cannot back kills the process
with SIGBUS at whichever write first touches it: with the temporary directory full, every
worker gunicorn started died at its first request, and the next one too.

So each worker first creates its files at ``RESERVED_BYTES`` with their blocks allocated
(``posix_fallocate``: the disk refuses now, with an error, or never); prometheus-client takes
a file's size as its capacity, which the service's bounded series do not outgrow. A worker
whose files the disk refuses keeps its metrics to itself (process-local values: a scrape it
answers shows its own counts, and the other workers' scrapes do not include them), says so
in the log, and serves. A dead worker's files stay (its counts are part of the service's),
cut down to what they hold (:func:`release`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct

from zaqar_delay.conf import PROMETHEUS_MULTIPROC_ENV

LOG = logging.getLogger(__name__)

#: The size of each kind of file the service's metrics are kept in (its gauges are read from
#: the stores when scraped, never stored): prometheus-client's 64 KiB doubled, to more than
#: twice what the bounded series fill. A worker that answered every method on every route
#: with every status it gives filled 1.4 MB of its histograms (request durations by method
#: and route) and 137 KB of its counters; the per-queue counters add at most
#: ``[metrics] max_queue_series`` queues' (100: 100 KB).
RESERVED_BYTES = {"counter": 1 << 20, "histogram": 4 << 20}


def paths(directory: str, pid: int) -> dict[str, int]:
    """The files a worker's metrics are kept in, with their sizes."""
    return {
        os.path.join(directory, f"{kind}_{pid}.db"): size for kind, size in RESERVED_BYTES.items()
    }


def reserve(directory: str, pid: int) -> None:
    """Create the worker's files at their ``RESERVED_BYTES``, every block allocated; OSError
    (and none left behind) when the disk has no room for them."""
    made = []
    try:
        for path, size in paths(directory, pid).items():
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            made.append(path)
            try:
                os.posix_fallocate(descriptor, 0, size)
            finally:
                os.close(descriptor)
    except OSError:
        for path in made:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        raise


def prepare(pid: int) -> None:
    """Before the worker loads the app: reserve its files in the shared metrics directory,
    or, when the disk refuses them, make its metrics process-local."""
    directory = os.environ.get(PROMETHEUS_MULTIPROC_ENV)
    if not directory:
        return
    try:
        reserve(directory, pid)
    except OSError as exc:
        from prometheus_client import values

        values.ValueClass = values.MutexValue
        del os.environ[PROMETHEUS_MULTIPROC_ENV]  # Metrics then keeps a registry of its own
        LOG.warning(
            "worker %s keeps its metrics to itself: the metrics directory %s has no room for "
            "its files (%s); scrapes it answers show its own counts only",
            pid,
            directory,
            exc,
        )


def release(directory: str, pid: int) -> None:
    """A worker is gone: cut its files down to the bytes they hold (the header says how
    many), so workers started again and again do not each leave their whole allocation."""
    for path in paths(directory, pid):
        with contextlib.suppress(OSError), open(path, "r+b") as f:  # gone, or never made
            header = f.read(4)
            if len(header) == 4:
                used = struct.unpack("i", header)[0]
                f.truncate(max(8, -(-used // 8) * 8))
