"""A small tmpfs to fill: a disk that refuses writes, for the tests of what a full disk does
(mounting one needs root; the tests that use it are skipped otherwise)."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def small_tmpfs(size: str) -> Iterator[str]:
    """A directory on a tmpfs of ``size`` (``mount`` syntax: ``2m``, ``64k``), unmounted
    after use."""
    mount_point = tempfile.mkdtemp(prefix="zd-small-disk-")
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mount_point],
        capture_output=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {result.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        for _ in range(50):
            unmounted = subprocess.run(["umount", mount_point], capture_output=True, check=False)
            if unmounted.returncode == 0:
                break
            time.sleep(0.2)


def grow(size: str, mount_point: str) -> None:
    """Give a tmpfs of :func:`small_tmpfs` room again: ``size`` in all."""
    subprocess.run(["mount", "-o", f"remount,size={size}", mount_point], check=True)


def fill(directory: str) -> None:
    """Fill the disk of ``directory`` to the last byte, and show that it refuses writes."""
    filler = os.open(os.path.join(directory, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError) as full:
            while True:
                os.write(filler, b"\0" * 65536)
        assert full.value.errno == errno.ENOSPC
        with pytest.raises(OSError) as refused:
            os.write(filler, b"x")
        assert refused.value.errno == errno.ENOSPC
    finally:
        os.close(filler)
