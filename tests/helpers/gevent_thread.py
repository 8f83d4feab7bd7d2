"""A gevent WSGI server served in a thread of its own (which gets its own gevent hub), for
tests that talk to it from the test's thread with ordinary sockets."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from gevent import pywsgi

S = TypeVar("S", bound=pywsgi.WSGIServer)


def serve_in_thread(make_server: Callable[[], S]) -> S:
    """The server ``make_server`` builds (on port 0), started and serving in a daemon thread."""
    started: list[S] = []
    ready = threading.Event()

    def serve() -> None:
        server = make_server()
        server.start()
        started.append(server)
        ready.set()
        server.serve_forever()

    threading.Thread(target=serve, daemon=True).start()
    assert ready.wait(5), "the server did not start"
    return started[0]
