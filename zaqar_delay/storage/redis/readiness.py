"""A pooled connection's readiness check, answered by the kernel rather than gevent's hub.

Each time redis-py's pool hands out a connection it asks whether the socket has something
to read, with a timeout of 0: bytes left over would mean the connection is out of step and
must be re-made. In a gevent worker that question goes through gevent's ``select.poll``,
which starts a watcher per socket and runs a round of the hub to answer "no": about 8% of a
worker's CPU under a load of small requests. A check with a timeout of 0 never waits, so
the original ``poll`` answers it as well, in one system call, without switching greenlets.
Checks that may wait (a pub/sub ``get_message(timeout=...)``) still go through gevent's
``poll``, so a waiting greenlet never blocks its worker.

Only the Redis Cluster client installs it: there every script call takes a connection from
redis-py's pool (1.08x produce, 1.07x consume on a 3-master cluster, ``benchmarks/README.rst``).
On a standalone store script calls have connections of their own (``scripts.py``) and skip the
check, and the override measured no gain (0.97x), so redis-py's own check stays.
"""

from __future__ import annotations

import select
from collections.abc import Callable
from typing import Any

from gevent import monkey

_INSTALLED = "_zaqar_delay_kernel_poll"
# select.poll as the kernel gives it, whether or not gevent patched the module.
_KERNEL_POLL: Callable[[], Any] = monkey.get_original("select", "poll")


def check_readiness_without_the_hub() -> bool:
    """Install the kernel-answered check in redis-py's hiredis parser when gevent patched
    ``select`` in this process (the server's workers); True when it is in place."""
    if not monkey.is_module_patched("select"):
        return False
    try:
        from redis._parsers import hiredis
    except ImportError:
        return False
    gevent_check = getattr(hiredis, "_socket_can_read", None)
    if gevent_check is None:
        return False  # a redis-py without this hook: its own check stays
    if getattr(gevent_check, _INSTALLED, False):
        return True
    hiredis._socket_can_read = _kernel_when_immediate(gevent_check)  # type: ignore[assignment]
    return True


def kernel_says_readable(sock: Any) -> bool:
    """Whether the kernel holds something to read on ``sock`` now: one ``poll`` system call
    with a timeout of 0, the kernel's own even where gevent patched ``select``."""
    poller = _KERNEL_POLL()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _kernel_when_immediate(
    gevent_check: Callable[[Any, float | None], bool],
) -> Callable[[Any, float | None], bool]:
    def socket_can_read(sock: Any, timeout: float | None) -> bool:
        if timeout == 0:
            return kernel_says_readable(sock)
        return gevent_check(sock, timeout)

    setattr(socket_can_read, _INSTALLED, True)
    return socket_can_read
