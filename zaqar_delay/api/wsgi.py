"""WSGI entry point for running under an external gunicorn or uWSGI.

``gunicorn -c etc/gunicorn.conf.py zaqar_delay.api.wsgi:application``; the configuration
file comes from ``ZAQAR_DELAY_CONFIG_FILE`` (optional). The app is built on first request
in each worker, so nothing connects before the fork.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

_app: Any = None


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    global _app
    if _app is None:
        from zaqar_delay.api.app import create_wsgi_app
        from zaqar_delay.conf import load_settings
        from zaqar_delay.storage.resolve import resolve_store

        config = os.environ.get("ZAQAR_DELAY_CONFIG_FILE")
        store = resolve_store(load_settings([config] if config else []))
        _app = create_wsgi_app(store.settings)
    result: Iterable[bytes] = _app(environ, start_response)
    return result
