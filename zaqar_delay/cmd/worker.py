"""The gunicorn worker class the server runs: gevent's WSGI server, sharing connections fairly.

gevent's WSGI server parses and answers requests with less CPU than gunicorn's ``gevent``
worker. As gunicorn runs it, though, a worker that wakes for a new connection accepts up to
100 waiting ones at once, and even one at a time the worker already on a CPU wins every
race: clients that open their keep-alive connections together (a pool at start-up, a load
balancer) all land on one worker while the others idle. Here a worker accepts one connection
per wake-up and leaves it to a less loaded worker when there is one (cmd/balance.py).
"""

from __future__ import annotations

import functools
import time
import weakref
from typing import Any

import gevent
from gunicorn.workers.ggevent import GeventPyWSGIWorker, PyWSGIServer

from zaqar_delay import logs, sibling_wakeups, stopping
from zaqar_delay.cmd import allocator, metric_files
from zaqar_delay.cmd.balance import DEFER_S, Share, share_of
from zaqar_delay.cmd.headers import Handler
from zaqar_delay.cmd.unsent import UnsentResponses
from zaqar_delay.conf.server import ServerSettings


class FairPyWSGIServer(PyWSGIServer):  # type: ignore[misc]
    max_accept = 1

    def __init__(
        self,
        *args: Any,
        share: Share | None = None,
        idle_s: float | None = None,
        transfer_s: float | None = None,
        unsent: UnsentResponses | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._share = share
        # Read by the handler: how long a connection may idle, or take to send a request head;
        # how long a client may take to send a body, or take a response (cmd/transfer.py);
        # the bytes of responses clients have yet to take (cmd/unsent.py).
        self.idle_s = idle_s
        self.transfer_s = transfer_s
        self.unsent = unsent
        if share is not None:
            share.serving()
        # After a deferral, the next connection is taken without asking if it comes before
        # then (monotonic s); 0.0 once a connection was weighed, or when there was no deferral.
        self._unconditional_until = 0.0
        # The connections being served (their handlers add themselves), and whether the
        # worker stops: read by the handlers.
        self.connections: weakref.WeakSet[Handler] = weakref.WeakSet()
        self.closing = False

    def close(self) -> None:
        """gunicorn's worker stops (SIGTERM, a reload): accept no connection, answer every
        waiting claim, close connections waiting for a request, and the others after their
        current response. gunicorn then exits the worker as soon as no connection is left,
        instead of waiting for idle ones until its graceful timeout and killing the worker
        with whatever requests it is serving then."""
        super().close()
        self.closing = True
        for handler in list(self.connections):
            handler.stop_serving()
        stopping.stop_serving()  # waiting claims answer, sessions close, pushes settle
        # A connection closed above leaves the worker's pool a few hub rounds later: let it
        # before gunicorn first looks whether any is left (it looks again a second later).
        gevent.sleep(0.01)

    def _do_read(self) -> None:
        if not self.accepts_now():
            # gevent's own way to pause accepting (it uses it after accept errors).
            self.stop_accepting()
            self._timer = self.loop.timer(DEFER_S)
            self._timer.start(self._resume)
            return
        super()._do_read()

    def accepts_now(self) -> bool:
        """Whether to accept a waiting connection now rather than leave it, for DEFER_S, to
        a worker holding fewer. After a deferral (:meth:`accept_next_unconditionally`) the first
        connection is accepted whatever the counts say; one, not every one in the window: a
        client opening its pool back to back would otherwise hand this worker all it opens
        within DEFER_S."""
        if self._share is None:
            return True
        until, self._unconditional_until = self._unconditional_until, 0.0
        return time.monotonic() < until or not self._share.should_defer()

    def accept_next_unconditionally(self) -> None:
        """The next connection accepted within DEFER_S from now is this worker's, whatever
        the counts say then (the less loaded worker may be hung)."""
        self._unconditional_until = time.monotonic() + DEFER_S

    def _resume(self) -> None:
        """After a deferral: accept again, the waiting connection first."""
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.close()
        if self.started:
            self.accept_next_unconditionally()
            self.start_accepting()

    def do_handle(self, *args: Any) -> None:
        if self._share is not None:
            self._share.opened()
        super().do_handle(*args)

    def do_close(self, *args: Any) -> None:
        if self._share is not None:
            self._share.closed()
        super().do_close(*args)


class Worker(GeventPyWSGIWorker):  # type: ignore[misc]
    """``worker_class = "zaqar_delay.cmd.worker.Worker"``, with the default transfer timeout
    and limit of unsent responses; :func:`worker_class` for others."""

    server_class = FairPyWSGIServer
    wsgi_handler = Handler
    transfer_s: float = ServerSettings().transfer_timeout
    unsent_mib: int = ServerSettings().max_unsent_responses

    def run(self) -> None:
        # After the app loaded: from here on the worker accepts connections.
        self.log.info("Worker serving (pid: %s)", self.pid)
        super().run()

    def patch(self) -> None:
        super().patch()
        logs.contexts_per_greenlet()

    def init_process(self) -> None:
        sibling_wakeups.join(getattr(self, "balance_slot", None))
        metric_files.prepare(self.pid)  # before the app's metrics write their files
        allocator.return_large_blocks()
        self.server_class = functools.partial(  # type: ignore[assignment]
            FairPyWSGIServer,
            share=share_of(self),
            idle_s=self.cfg.keepalive,
            transfer_s=self.transfer_s,
            unsent=UnsentResponses(self.unsent_mib * 2**20) if self.unsent_mib else None,
        )
        super().init_process()


@functools.cache  # one class per value: gunicorn's configuration compares settings
def worker_class(transfer_s: float, unsent_mib: int = Worker.unsent_mib) -> type[Worker]:
    """gunicorn's ``worker_class``: :class:`Worker` with ``[server] transfer_timeout`` and
    ``max_unsent_responses`` (gunicorn has no setting of its own for them)."""
    return type(Worker.__name__, (Worker,), {"transfer_s": transfer_s, "unsent_mib": unsent_mib})
