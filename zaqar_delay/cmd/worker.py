"""The gunicorn worker class the server runs: gevent's WSGI server, sharing connections fairly.

gevent's WSGI server parses and answers requests with less CPU than gunicorn's ``gevent``
worker. As gunicorn runs it, though, a worker that wakes for a new connection accepts up to
100 waiting ones at once; clients that open their keep-alive connections together (a pool at
start-up, a load balancer) then all land on one worker while the others idle. Accepting one
connection per wake-up, as gunicorn's own gevent worker does, lets every worker take its share.
"""

from __future__ import annotations

from gunicorn.workers.ggevent import GeventPyWSGIWorker, PyWSGIServer


class FairPyWSGIServer(PyWSGIServer):  # type: ignore[misc]
    max_accept = 1


class Worker(GeventPyWSGIWorker):  # type: ignore[misc]
    """``worker_class = "zaqar_delay.cmd.worker.Worker"``."""

    server_class = FairPyWSGIServer
