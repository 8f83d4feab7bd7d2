"""Configuration: the typed settings built from the options (:mod:`zaqar_delay.opts`), the
config files, the command line and the environment.

The rest of the package never touches ``cfg`` and reads the frozen :class:`Settings`.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Sequence
from typing import Any

from oslo_config import cfg

from zaqar_delay.opts import GROUPS, STORAGE_URI_ENV

__all__ = ["STORAGE_URI_ENV", "Limits", "Settings", "load_settings", "make_conf"]

# prometheus-client's multiprocess directory; it must be set before prometheus_client is
# imported, so it lives here rather than in metrics.py.
PROMETHEUS_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def _defaults(group: str) -> dict[str, Any]:
    """The declared default of every option of ``group``: the one place defaults live."""
    return {opt.dest: opt.default for opt in GROUPS[group]}


_SERVER, _STORAGE, _TRANSPORT = _defaults("server"), _defaults("storage"), _defaults("transport")
_JOURNAL, _METRICS = _defaults("journal"), _defaults("metrics")
_NOTIFICATION = _defaults("notification")
MIB = 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """Validation limits and defaults of the v2 API (Zaqar's ``[transport]`` group); each
    field is the option of the same name."""

    default_message_ttl: int = _TRANSPORT["default_message_ttl"]
    default_message_delay: int = _TRANSPORT["default_message_delay"]
    default_claim_ttl: int = _TRANSPORT["default_claim_ttl"]
    default_claim_grace: int = _TRANSPORT["default_claim_grace"]
    max_queues_per_page: int = _TRANSPORT["max_queues_per_page"]
    max_messages_per_page: int = _TRANSPORT["max_messages_per_page"]
    max_messages_per_claim_or_pop: int = _TRANSPORT["max_messages_per_claim_or_pop"]
    max_queue_metadata: int = _TRANSPORT["max_queue_metadata"]
    max_messages_post_size: int = _TRANSPORT["max_messages_post_size"]
    max_message_ttl: int = _TRANSPORT["max_message_ttl"]
    max_message_delay: int = _TRANSPORT["max_message_delay"]
    deliver_at_tolerance: float = _TRANSPORT["deliver_at_tolerance"]
    max_claim_wait: int = _TRANSPORT["max_claim_wait"]
    max_claim_ttl: int = _TRANSPORT["max_claim_ttl"]
    max_claim_grace: int = _TRANSPORT["max_claim_grace"]
    default_subscription_ttl: int = _TRANSPORT["default_subscription_ttl"]
    max_subscriptions_per_page: int = _TRANSPORT["max_subscriptions_per_page"]
    subscriber_types: tuple[str, ...] = tuple(_TRANSPORT["subscriber_types"])
    client_id_uuid_safe: str = _TRANSPORT["client_id_uuid_safe"]
    min_length_client_id: int = _TRANSPORT["min_length_client_id"]
    max_length_client_id: int = _TRANSPORT["max_length_client_id"]
    message_delete_with_claim_id: bool = _TRANSPORT["message_delete_with_claim_id"]


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    """Everything the service needs to run, resolved from the config file and the environment.
    Defaults are the options' (see :func:`load_settings` for which option each field is)."""

    storage_uri: str = _STORAGE["uri"]
    data_dir: str = _STORAGE["data_dir"]
    embedded_appendfsync: str = _STORAGE["embedded_appendfsync"]
    socket_timeout: float = _STORAGE["socket_timeout"]
    key_prefix: str = _STORAGE["key_prefix"]
    max_connections: int = _STORAGE["max_connections"]
    database: str = _STORAGE["database"]
    unreliable: bool = _STORAGE["unreliable"]
    bind: str = _SERVER["bind"]
    workers: int = _SERVER["workers"]
    timeout: int = _SERVER["timeout"]
    limits: Limits = dataclasses.field(default_factory=Limits)
    signed_url_secret: str = _defaults("signed_url")["secret_key"]
    auth_strategy: str = _SERVER["auth_strategy"]
    default_project: str = _SERVER["default_project"]
    config_files: tuple[str, ...] = ()
    journal_path: str = _JOURNAL["path"]
    journal_max_bytes: int = _JOURNAL["max_file_size"] * MIB
    metrics_max_queue_series: int = _METRICS["max_queue_series"]
    message_encryption_key: str = _TRANSPORT["message_encryption_key"]
    message_encryption_old_keys: tuple[str, ...] = tuple(_TRANSPORT["message_encryption_old_keys"])
    push: bool = _NOTIFICATION["push"]
    push_timeout: float = _NOTIFICATION["push_timeout"]
    require_confirmation: bool = _NOTIFICATION["require_confirmation"]
    push_concurrency: int = _NOTIFICATION["push_concurrency"]
    denied_networks: tuple[str, ...] = tuple(_NOTIFICATION["denied_networks"])
    allowed_networks: tuple[str, ...] = tuple(_NOTIFICATION["allowed_networks"])
    smtp_host: str = _NOTIFICATION["smtp_host"]
    smtp_port: int = _NOTIFICATION["smtp_port"]
    smtp_starttls: bool = _NOTIFICATION["smtp_starttls"]
    smtp_username: str = _NOTIFICATION["smtp_username"]
    smtp_password: str = _NOTIFICATION["smtp_password"]
    smtp_sender: str = _NOTIFICATION["smtp_sender"]
    smtp_allowed_senders: tuple[str, ...] = tuple(_NOTIFICATION["smtp_allowed_senders"])


def make_conf() -> cfg.ConfigOpts:
    """A fresh ConfigOpts with every option registered (no global state)."""
    conf = cfg.ConfigOpts()
    for group, opts in GROUPS.items():
        conf.register_opts(opts, group=group)
    return conf


# zaqar-delay-server's command line; --config-file is oslo.config's own.
cli_opts: list[cfg.Opt] = [
    cfg.StrOpt("bind", metavar="HOST:PORT", help="Address to listen on ([server] bind)."),
    cfg.IntOpt("workers", min=1, metavar="N", help="gunicorn worker processes ([server] workers)."),
    cfg.StrOpt(
        "data-dir",
        metavar="DIR",
        help="Directory of the embedded Redis files ([storage] data_dir).",
    ),
    cfg.StrOpt(
        "journal-dir",
        metavar="DIR",
        help="Write the lifecycle journal (JSON lines per message event) to DIR ([journal] path).",
    ),
]


def load_settings(
    config_files: Sequence[str] = (), environ: dict[str, str] | None = None
) -> Settings:
    """Read the INI files (later ones win) and the environment into :class:`Settings`.

    Raises ``oslo_config.cfg.Error`` (or ``ValueError``) with a one-line message on bad input.
    """
    conf = make_conf()
    conf(
        args=[],
        project="zaqar-delay",
        default_config_files=list(config_files),
        default_config_dirs=[],
    )
    return _settings(conf, tuple(config_files), os.environ if environ is None else environ)


def settings_from_command_line(argv: Sequence[str], prog: str, description: str) -> Settings:
    """:class:`Settings` from a command line: ``--config-file`` (repeatable) and the options
    of :data:`cli_opts`, which win over the files. Exits (argparse's way) on a bad argument;
    raises ``oslo_config.cfg.Error`` on a bad file."""
    conf = make_conf()
    conf.register_cli_opts(cli_opts)
    conf(
        args=list(argv),
        project="zaqar-delay",
        prog=prog,
        description=description,
        default_config_files=[],
        default_config_dirs=[],
    )
    files = list(conf.config_file or [])
    if conf.config_dir:  # parsed after the files, in name order (oslo.config's rule)
        files += sorted(glob.glob(os.path.join(conf.config_dir, "*.conf")))
    settings = _settings(conf, tuple(files), os.environ)
    overrides: dict[str, Any] = {}
    if conf.bind:
        overrides["bind"] = conf.bind
    if conf.workers is not None:
        overrides["workers"] = conf.workers
    if conf.data_dir:
        overrides["data_dir"] = conf.data_dir
    if conf.journal_dir:
        overrides["journal_path"] = os.path.abspath(conf.journal_dir)
    return dataclasses.replace(settings, **overrides)


def _settings(conf: cfg.ConfigOpts, config_files: tuple[str, ...], env: Any) -> Settings:
    if conf.notification.require_confirmation and not conf.signed_url.secret_key:
        # The confirmation request is a pre-signed URL: without a secret none can be made.
        raise ValueError("[notification] require_confirmation needs [signed_url] secret_key")
    limits = Limits(**{f.name: getattr(conf.transport, f.name) for f in dataclasses.fields(Limits)})
    limits = dataclasses.replace(limits, subscriber_types=tuple(limits.subscriber_types))
    return Settings(
        storage_uri=env.get(STORAGE_URI_ENV) or conf.storage.uri,
        data_dir=conf.storage.data_dir,
        embedded_appendfsync=conf.storage.embedded_appendfsync,
        socket_timeout=conf.storage.socket_timeout,
        key_prefix=conf.storage.key_prefix,
        max_connections=conf.storage.max_connections,
        database=conf.storage.database,
        unreliable=conf.storage.unreliable,
        bind=conf.server.bind,
        workers=conf.server.workers,
        timeout=conf.server.timeout,
        limits=limits,
        signed_url_secret=conf.signed_url.secret_key,
        auth_strategy=conf.server.auth_strategy,
        default_project=conf.server.default_project,
        config_files=config_files,
        journal_path=conf.journal.path,
        journal_max_bytes=conf.journal.max_file_size * MIB,
        metrics_max_queue_series=conf.metrics.max_queue_series,
        message_encryption_key=conf.transport.message_encryption_key,
        message_encryption_old_keys=tuple(conf.transport.message_encryption_old_keys),
        push=conf.notification.push,
        push_timeout=conf.notification.push_timeout,
        require_confirmation=conf.notification.require_confirmation,
        push_concurrency=conf.notification.push_concurrency,
        denied_networks=tuple(conf.notification.denied_networks),
        allowed_networks=tuple(conf.notification.allowed_networks),
        smtp_host=conf.notification.smtp_host,
        smtp_port=conf.notification.smtp_port,
        smtp_starttls=conf.notification.smtp_starttls,
        smtp_username=conf.notification.smtp_username,
        smtp_password=conf.notification.smtp_password,
        smtp_sender=conf.notification.smtp_sender,
        smtp_allowed_senders=tuple(conf.notification.smtp_allowed_senders),
    )
