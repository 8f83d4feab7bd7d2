"""``zaqar-delay-server``: serve the API under gunicorn, on the embedded Redis by default."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from oslo_config import cfg

from zaqar_delay import master_directories
from zaqar_delay.conf import PROMETHEUS_MULTIPROC_ENV, Settings, settings_from_command_line
from zaqar_delay.errors import StorageConfigError
from zaqar_delay.keystone.auth_token import check_configured
from zaqar_delay.logs import LogConfigError, setup_logging
from zaqar_delay.pooling.embedded import stop_pool_stores
from zaqar_delay.storage.resolve import redact, redact_in, resolve_store

LOG = logging.getLogger("zaqar_delay")


DESCRIPTION = (
    "Serve the Zaqar v2 API with delayed delivery. With no options: 127.0.0.1:8888, embedded "
    "Redis under the user's data directory."
)


class SupervisingArbiter(Arbiter):  # type: ignore[misc]
    """gunicorn's master loop, which also keeps the embedded store running.

    The loop manages the workers at least once a second, and at once when a child exits; the
    embedded redis-server is the master's child, so its death is noticed right away.
    """

    def manage_workers(self) -> None:
        self.app.keep_store_running()
        super().manage_workers()


class Server(BaseApplication):  # type: ignore[misc]
    """gunicorn running ``create_wsgi_app`` in each worker, after the fork; the master also
    runs ``keep_store_running`` every round of its loop."""

    def __init__(self, settings: Settings, keep_store_running: Callable[[], None]) -> None:
        self.settings = settings
        self.keep_store_running = keep_store_running
        super().__init__()

    def run(self) -> None:
        try:
            SupervisingArbiter(self).run()
        except RuntimeError as exc:  # what gunicorn's own run() does with a startup failure
            print(f"\nError: {exc}\n", file=sys.stderr)
            sys.exit(1)

    def load_config(self) -> None:
        from zaqar_delay.cmd import gunicorn_defaults

        for key, value in gunicorn_defaults.options(self.settings).items():
            # Settings newer than the installed gunicorn are skipped rather than fatal.
            if key in self.cfg.settings:
                self.cfg.set(key, value)

    def load(self) -> Any:
        from zaqar_delay.api.app import create_wsgi_app

        return create_wsgi_app(self.settings)


def main(argv: Sequence[str] | None = None) -> int:
    # The workers are gevent workers. Patch here, before the storage clients are imported and
    # the store is checked: patching after pymongo or redis made locks breaks the workers.
    from gevent import monkey

    monkey.patch_all()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = None
    try:
        settings = settings_from_command_line(
            sys.argv[1:] if argv is None else argv, "zaqar-delay-server", DESCRIPTION
        )
        # From here [DEFAULT] debug, log_file, use_json... apply (before, lines go to stderr).
        setup_logging(settings)
        if settings.server.auth_strategy == "keystone":
            check_configured(settings)
        store = resolve_store(settings)
    except (StorageConfigError, ValueError, OSError, LogConfigError) as exc:
        # A URI the store's client refused is quoted in the message: without its secrets.
        uri = settings.storage.uri if settings is not None else None
        message = redact_in(str(getattr(exc, "description", exc)), uri)
        print(f"zaqar-delay-server: {message}", file=sys.stderr)
        return 2
    except cfg.Error as exc:
        print(f"zaqar-delay-server: configuration error: {exc}", file=sys.stderr)
        return 2
    metrics_dir = _metrics_directory()
    for warning in store.warnings:
        LOG.warning("%s", warning)
    if store.durability is not None:
        LOG.info("%s", store.durability.summary())
    uri = redact(store.settings.storage.uri)
    LOG.info("serving on http://%s with storage %s", store.settings.server.bind, uri)
    try:
        Server(store.settings, store.keep_running).run()
    finally:
        if store.settings.pooling:
            # The workers started the embedded pools' stores and are gone now.
            for directory in stop_pool_stores(store.settings):
                LOG.info("stopped the embedded pool store in %s", directory)
        store.close()
        if metrics_dir is not None:
            master_directories.remove(metrics_dir)
    return 0


def _metrics_directory() -> str | None:
    """Give the workers a fresh shared directory for their metrics, unless one is configured;
    returns it when this process made it (and so removes it at exit)."""
    if os.environ.get(PROMETHEUS_MULTIPROC_ENV):
        return None
    directory = master_directories.make("zaqar-delay-metrics-")
    os.environ[PROMETHEUS_MULTIPROC_ENV] = directory
    return directory


if __name__ == "__main__":
    sys.exit(main())
