"""WSGI entry point for running under an external gunicorn or uWSGI.

``gunicorn -c etc/gunicorn.conf.py zaqar_delay.api.wsgi:application``; the configuration
file comes from ``ZAQAR_DELAY_CONFIG_FILE`` (optional). The app is built on first request
in each worker, so nothing connects before the fork, and exactly once: requests that arrive
together while it is built (threads, or greenlets of a gevent worker, where the lock is
gevent's) wait for that one build instead of starting a second app with a second dispatcher.
Under uWSGI, a worker that exits stops what the process runs (``stopping.stop_serving``): its
push dispatcher records the outcomes of its pushes in flight and gives back those it leased
ahead, as under zaqar-delay-server.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

_app: Any = None
_building = threading.Lock()


def _build() -> Any:
    from zaqar_delay.api.app import create_wsgi_app
    from zaqar_delay.conf import load_settings
    from zaqar_delay.keystone.auth_token import check_configured
    from zaqar_delay.storage.resolve import resolve_store

    config = os.environ.get("ZAQAR_DELAY_CONFIG_FILE")
    settings = load_settings([config] if config else [])
    if settings.server.auth_strategy == "keystone":
        check_configured(settings)
    store = resolve_store(settings)
    return create_wsgi_app(store.settings)


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    global _app
    if _app is None:
        with _building:
            if _app is None:
                _app = _build()
    result: Iterable[bytes] = _app(environ, start_response)
    return result


def _stop_at_uwsgi_exit() -> None:
    """Under uWSGI (its ``uwsgi`` module exists only there), stop serving as the worker
    exits: after a graceful stop has let its requests end, before the process goes."""
    try:
        import uwsgi
    except ImportError:
        return
    from zaqar_delay import stopping

    uwsgi.atexit = stopping.stop_serving


_stop_at_uwsgi_exit()
