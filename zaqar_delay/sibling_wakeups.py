"""Wake-ups between the worker processes of one server, for a store that sends none (Swift).

Without the store's wake-ups a waiting claim re-checks its queue every second
(``waiting.RECHECK_WITHOUT_WAKEUPS_S``), and the process that made a queue's messages
claimable wakes only its own waiters. This tells the server's other workers as well: the
master makes a private directory (mode 0700, ``master_directories``) before its first fork
(:func:`prepare`); a worker binds a datagram socket there, named for its slot, once it has a
waiting claim (:meth:`Siblings.listen`); and a process that made a queue's messages claimable
sends the name of the queue's line to every other socket there (:meth:`Siblings.tell`).

A datagram is a hint, as a store's wake-up is: one lost (a full buffer, a worker restarting,
the socket of a worker that died) costs a waiter what no wake-up costs, its next re-check.
Workers on other hosts are not reached; they re-check as before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable

from zaqar_delay import master_directories

LOG = logging.getLogger(__name__)

# Longest line name sent (a queue's is its project and name); a longer one is not sent, and
# its waiters in other workers find the messages at their next re-check.
MAX_CHANNEL_BYTES = 2048

OnWake = Callable[[str], None]

# Set in the master before its first fork, and so known to every worker it forks.
_directory: str | None = None
# This worker's part, once it joined (:func:`join`).
_joined: Siblings | None = None


def prepare() -> None:
    """In the master, before a fork: make the directory of the workers' sockets (once). When
    it cannot be made, the workers run without each other's wake-ups."""
    global _directory
    if _directory is None:
        try:
            _directory = master_directories.make("zaqar-delay-workers-")
        except OSError as exc:
            LOG.warning("workers will not wake each other's waiting claims: %s", exc)


def remove() -> None:
    """In the master, as it exits: remove the directory and the sockets in it."""
    global _directory
    if _directory is not None:
        master_directories.remove(_directory)
        _directory = None


def join(slot: int | None) -> None:
    """In a worker, as it starts: take part under ``slot`` (None: send only), when its
    master prepared a directory."""
    global _joined
    if _directory is not None:
        _joined = Siblings(_directory, None if slot is None else str(slot))


def joined() -> Siblings | None:
    """This process's part, or None when it is no worker of a server (a test, a tool)."""
    return _joined


class Siblings:
    """A worker's socket in the directory, and how it tells the others."""

    def __init__(self, directory: str, name: str | None) -> None:
        self._directory = directory
        self._own = None if name is None else os.path.join(directory, name)
        self._listeners: list[OnWake] = []
        self._lock = threading.Lock()
        # Made at first use, in the worker, so that it is gevent's socket when gevent runs.
        self._sender: socket.socket | None = None

    def listen(self, on_wake: OnWake) -> None:
        """Call ``on_wake(line)`` for each line name another worker sends from now on; the
        first call binds this worker's socket and starts reading it."""
        with self._lock:
            if on_wake in self._listeners:
                return
            self._listeners.append(on_wake)
            if len(self._listeners) > 1 or self._own is None:
                return
            receiver = self._bind(self._own)
        if receiver is not None:
            threading.Thread(
                target=self._receive, args=(receiver,), name="zaqar-delay-siblings", daemon=True
            ).start()

    @staticmethod
    def _bind(path: str) -> socket.socket | None:
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # left by the worker that had this slot before
            receiver.bind(path)
        except OSError:
            receiver.close()
            LOG.warning("no wake-ups from the other workers: cannot bind %s", path)
            return None
        return receiver

    def _receive(self, receiver: socket.socket) -> None:
        try:
            while True:
                line = receiver.recv(MAX_CHANNEL_BYTES).decode("utf-8", "surrogatepass")
                for on_wake in list(self._listeners):
                    on_wake(line)
        except OSError:  # pragma: no cover - a socket of our own never fails while open
            LOG.exception("wake-ups from the other workers stopped")

    def tell(self, line: str) -> None:
        """Send ``line`` to every other worker's socket, dropping what cannot be sent now."""
        data = line.encode("utf-8", "surrogatepass")
        if len(data) > MAX_CHANNEL_BYTES:
            return
        with self._lock:
            if self._sender is None:
                self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sender.setblocking(False)
        try:
            names = os.listdir(self._directory)
        except OSError:
            return
        for name in names:
            path = os.path.join(self._directory, name)
            if path != self._own and not name.startswith("."):  # the master's lock
                # Gone, not bound, or its buffer full: that worker re-checks instead.
                with contextlib.suppress(OSError):
                    self._sender.sendto(data, path)
