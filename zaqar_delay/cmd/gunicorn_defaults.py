"""The gunicorn settings the server runs with (``etc/gunicorn.conf.py`` applies them too)."""

from __future__ import annotations

import math
import os
from typing import Any

from zaqar_delay import sibling_wakeups
from zaqar_delay.cmd import balance, metric_files
from zaqar_delay.cmd.worker import worker_class
from zaqar_delay.conf import PROMETHEUS_MULTIPROC_ENV, Settings

# Concurrent connections each worker serves. Waiting claims (?wait=S) hold theirs for up to
# S seconds while costing only a greenlet, so 2 workers hold 2,000 waiting claims.
WORKER_CONNECTIONS = 1000
# How long a stopping worker may take (gunicorn's graceful_timeout) beyond the push timeout it
# waits for its pushes in flight: to record their outcomes and end the rest.
STOP_MARGIN_S = 5
MIN_GRACEFUL_TIMEOUT_S = 10


def options(settings: Settings) -> dict[str, Any]:
    """gevent workers: a waiting claim sleeps in a greenlet instead of holding a process, and
    the short requests around it keep being served; scale CPU with ``workers``. gevent's own
    WSGI server (``gevent_pywsgi``) parses and answers requests with less CPU than gunicorn's
    gevent worker (about 40% more hello-world requests/s here); see cmd/worker.py."""
    return {
        "bind": binds(settings),
        "workers": settings.server.workers,
        "worker_class": worker_class(
            settings.server.transfer_timeout, settings.server.max_unsent_responses
        ),
        "worker_connections": WORKER_CONNECTIONS,
        "timeout": settings.server.timeout,
        "graceful_timeout": graceful_timeout_s(settings),
        "keepalive": settings.server.keepalive,
        "proc_name": "zaqar-delay",
        "accesslog": None,
        "errorlog": "-",
        "loglevel": "info",
        # One control socket per user would clash between servers on one machine.
        "control_socket_disable": True,
        "pre_fork": before_fork,
        "child_exit": worker_exited,
        "on_exit": master_exits,
    }


def graceful_timeout_s(settings: Settings) -> int:
    """How long a stopping worker has before gunicorn kills it: 10 s, or longer when the
    dispatcher's wait for its pushes in flight (``[notification] push_timeout``) needs it, so
    that a push a receiver answers late in that wait is recorded and not sent again."""
    wait_s = math.ceil(settings.notification.push_timeout) + STOP_MARGIN_S
    return max(MIN_GRACEFUL_TIMEOUT_S, wait_s)


def binds(settings: Settings) -> list[str]:
    """The API's address, and ``[drivers:transport:websocket]``'s port when one is set (on its
    ``bind``, else the API's host)."""
    found = [settings.server.bind]
    websocket = settings.websocket
    if websocket.port:
        host = websocket.bind or settings.server.bind.rsplit(":", 1)[0]
        found.append(f"{host}:{websocket.port}")
    return found


def before_fork(server: Any, worker: Any) -> None:
    """gunicorn ``pre_fork`` (in the master): the worker's slot, and the directory where
    workers wake each other's waiting claims."""
    balance.assign_slot(server, worker)
    sibling_wakeups.prepare()


def master_exits(server: Any) -> None:
    """gunicorn ``on_exit``: remove what the master made for its workers."""
    sibling_wakeups.remove()


def worker_exited(server: Any, worker: Any) -> None:
    """gunicorn ``child_exit`` (in the master): free what the dead worker held."""
    balance.release_slot(worker)
    forget_worker_metrics(worker)


def forget_worker_metrics(worker: Any) -> None:
    """Drop a dead worker's live gauges from the shared metrics directory, and cut its
    files down to what they hold."""
    directory = os.environ.get(PROMETHEUS_MULTIPROC_ENV)
    if not directory:
        return  # each worker keeps its own metrics: nothing shared to clean
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]
    metric_files.release(directory, worker.pid)
