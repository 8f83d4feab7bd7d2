"""cmd/allocator.py: with glibc's threshold fixed, a large block is mapped on its own even
after a larger one was freed (which otherwise raises the threshold, and the next large
blocks are carved from the heap, where they stay once freed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# In a process of its own (the threshold is the process's): how many KiB the heap grew by to
# hold a 4 MiB block allocated after a 16 MiB one was freed.
PROBE = """
import sys
from zaqar_delay.cmd import allocator

def heap_kib():
    for line in open("/proc/self/maps").read().splitlines():
        if line.endswith("[heap]"):
            start, end = line.split()[0].split("-")
            return (int(end, 16) - int(start, 16)) // 1024
    return 0

if sys.argv[1] == "fixed":
    assert allocator.return_large_blocks()
freed = b"x" * (16 * 2**20)
del freed
before = heap_kib()
block = b"y" * (4 * 2**20)
print(heap_kib() - before)
"""


def heap_growth(mode: str) -> int:
    run = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    return int(run.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_large_block_is_mapped_on_its_own_with_the_threshold_fixed() -> None:
    assert heap_growth("default") >= 4 * 1024  # the threshold rose: carved from the heap
    assert heap_growth("fixed") == 0
