"""Logging the oslo.log way: ``[DEFAULT] debug``, ``log_file``, ``log_dir``,
``log_config_append``, ``use_json`` (oslo's JSON formatter), ``use_syslog`` and the rest of
oslo.log's options, read from the server's configuration files.

A line logged while a request is served carries its request id (the
``x-openstack-request-id`` its response carries) and project: the API's middleware makes an
oslo.context for each request (:func:`request_context`), which oslo.log's formatters read.
"""

from __future__ import annotations

import threading

from oslo_context import context
from oslo_log import log

from zaqar_delay.conf import Settings, make_conf

PROJECT = "zaqar-delay"
# A log_config_append file that cannot be used.
LogConfigError = log.LogConfigError


def setup_logging(settings: Settings) -> None:
    """Configure the root logger from ``settings``' configuration files, replacing any
    handlers set before (the ones that logged while the files were read)."""
    conf = make_conf()
    log.register_options(conf)  # before the files are read: some are command-line options
    conf(
        args=[],
        project=PROJECT,
        default_config_files=list(settings.config_files),
        default_config_dirs=[],
    )
    log.setup(conf, PROJECT)


def request_context(request_id: str) -> context.RequestContext:
    """A fresh oslo.context for the request being served, made the current one of this
    thread or greenlet, so that every line logged until the next request names it."""
    return context.RequestContext(request_id=request_id, overwrite=True)


def contexts_per_greenlet() -> None:
    """Keep oslo.context's current context per greenlet once gevent has patched ``threading``
    (a no-op before).

    oslo.context keeps it in a ``threading.local`` made when the module is first imported. One
    made before gevent patched ``threading`` (the server's command imports oslo.log first)
    belongs to the OS thread, which every greenlet of a worker shares: each line would name
    whichever request the worker read last, and the dispatchers' lines a request too."""
    if not isinstance(context._request_store, threading.local):
        context._request_store = threading.local()
