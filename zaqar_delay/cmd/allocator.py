"""Large blocks of a worker's memory go back to the system once freed.

glibc's ``malloc`` maps a block above its threshold (128 KiB at start) on its own and unmaps
it when freed, but raises the threshold to the size of each mapped block freed, up to 32 MiB:
after a few large responses (a listing of big messages is megabytes), later ones are carved
from the heap, which does not shrink while any block above them lives. A worker that served
a burst of large answers, or held them for clients that did not take them, then kept
gigabytes it no longer used. A fixed threshold (setting it turns the raising off) keeps every
large block mapped on its own, returned when freed.
"""

from __future__ import annotations

import ctypes
import logging

LOG = logging.getLogger(__name__)

# mallopt's parameter number for the threshold (glibc's malloc.h).
M_MMAP_THRESHOLD = -3
# glibc's own starting threshold, kept.
MMAP_THRESHOLD_BYTES = 128 * 1024


def return_large_blocks() -> bool:
    """Fix glibc's mapping threshold at :data:`MMAP_THRESHOLD_BYTES` in this process. False
    (and nothing changed) where the C library is not glibc."""
    try:
        # The interpreter's own symbols, its C library's among them (no library search,
        # which runs a subprocess).
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) != 1:
        LOG.warning("The C library refused a fixed mmap threshold; large blocks may be kept")
        return False
    return True
