"""Context switches read from /proc, as the soak reports them per message."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from benchmarks.procstat import context_switches

# Sleeps 200 times: each sleep gives up the CPU, a voluntary context switch.
SLEEPER = "import sys, time\nfor _ in range(200): time.sleep(0.001)\nsys.stdin.read()"


def test_a_process_that_sleeps_is_counted_and_its_parent_can_leave_it_out() -> None:
    child = subprocess.Popen([sys.executable, "-c", SLEEPER], stdin=subprocess.PIPE)
    try:
        # The child is still alive (waiting on stdin) once its sleeps are done.
        counted = 0
        for _ in range(500):
            counted = context_switches([child.pid])
            if counted >= 200:
                break
            time.sleep(0.01)
        assert child.poll() is None, "the sleeper exited before it was read"
        assert counted >= 200
        own = context_switches([os.getpid()], descendants=False)
        with_children = context_switches([os.getpid()])
        assert with_children - own >= 200, "the sleeping child was not counted"
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(10)
    assert context_switches([child.pid]) == 0, "a process that is gone still counted"
