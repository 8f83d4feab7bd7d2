"""The gunicorn settings the server runs with (mirrored in ``etc/gunicorn.conf.py``)."""

from __future__ import annotations

from typing import Any

from zaqar_delay.conf import Settings


def options(settings: Settings) -> dict[str, Any]:
    """Sync workers: every request is a short Redis script call, so one request per process at
    a time keeps latency flat; scale with ``workers``."""
    return {
        "bind": [settings.bind],
        "workers": settings.workers,
        "worker_class": "sync",
        "timeout": settings.timeout,
        "graceful_timeout": 10,
        "keepalive": 5,
        "proc_name": "zaqar-delay",
        "accesslog": None,
        "errorlog": "-",
        "loglevel": "info",
        # One control socket per user would clash between servers on one machine.
        "control_socket_disable": True,
    }
