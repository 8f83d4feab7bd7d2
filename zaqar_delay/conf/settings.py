"""The service's settings, composed of each option group's, and how they are read from the
config files, the command line and the environment."""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Sequence
from typing import Any

from oslo_config import cfg

from zaqar_delay.conf.drivers import ZaqarDrivers
from zaqar_delay.conf.environment import STORAGE_URI_ENV
from zaqar_delay.conf.journal import JournalSettings
from zaqar_delay.conf.metrics import MetricsSettings
from zaqar_delay.conf.notification import NotificationSettings
from zaqar_delay.conf.options import GROUPS, option, options, options_of
from zaqar_delay.conf.pooling import CatalogSettings
from zaqar_delay.conf.server import ServerSettings
from zaqar_delay.conf.signed_url import SignedUrlSettings
from zaqar_delay.conf.storage import StorageSettings
from zaqar_delay.conf.swift import SwiftSettings
from zaqar_delay.conf.transport import EncryptionSettings, Limits
from zaqar_delay.conf.websocket import WebSocketSettings


@options("DEFAULT")
@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    """Everything the service needs to run, resolved from the config files and the
    environment (``ZAQAR_DELAY_STORAGE_URI`` overrides ``[storage] uri``): one field per
    option group, and ``[DEFAULT]``'s options."""

    limits: Limits = dataclasses.field(default_factory=Limits)
    config_files: tuple[str, ...] = ()
    server: ServerSettings = dataclasses.field(default_factory=ServerSettings)
    storage: StorageSettings = dataclasses.field(default_factory=StorageSettings)
    catalog: CatalogSettings = dataclasses.field(default_factory=CatalogSettings)
    swift: SwiftSettings = dataclasses.field(default_factory=SwiftSettings)
    encryption: EncryptionSettings = dataclasses.field(default_factory=EncryptionSettings)
    signed_url: SignedUrlSettings = dataclasses.field(default_factory=SignedUrlSettings)
    journal: JournalSettings = dataclasses.field(default_factory=JournalSettings)
    metrics: MetricsSettings = dataclasses.field(default_factory=MetricsSettings)
    notification: NotificationSettings = dataclasses.field(default_factory=NotificationSettings)
    websocket: WebSocketSettings = dataclasses.field(default_factory=WebSocketSettings)
    pooling: bool = option(
        cfg.BoolOpt,
        default=False,
        deprecated_opts=[cfg.DeprecatedOpt("sharding")],  # Zaqar's old name, still read
        help=(
            "Spread queues over pools: stores an admin registers with /v2/pools, each queue "
            "placed on one of them (by weight, within its _flavor). The catalog of pools, "
            "flavors and placements is kept in [storage] uri."
        ),
    )
    admin_mode: bool = option(
        cfg.BoolOpt,
        default=False,
        help=(
            "With auth_strategy = noauth: serve the admin API (/v2/pools, /v2/flavors) to any "
            "caller. With keystone the admin API is served to tokens with the admin role."
        ),
    )


# Each group's settings, by the Settings field that holds them.
_GROUP_FIELDS: dict[str, type[Any]] = {
    "limits": Limits,
    "server": ServerSettings,
    "storage": StorageSettings,
    "catalog": CatalogSettings,
    "swift": SwiftSettings,
    "encryption": EncryptionSettings,
    "signed_url": SignedUrlSettings,
    "journal": JournalSettings,
    "metrics": MetricsSettings,
    "notification": NotificationSettings,
    "websocket": WebSocketSettings,
}


def make_conf() -> cfg.ConfigOpts:
    """A fresh ConfigOpts with every option registered (no global state)."""
    conf = cfg.ConfigOpts()
    for group, opts in GROUPS.items():
        conf.register_opts(opts, group=None if group == "DEFAULT" else group)
    return conf


def conf_of(settings: Settings) -> cfg.ConfigOpts:
    """A ConfigOpts that read the files ``settings`` came from, for the libraries configured
    through oslo.config itself (keystonemiddleware's ``[keystone_authtoken]``, oslo.policy's
    ``[oslo_policy]``), which register their own options on it."""
    conf = make_conf()
    conf(
        args=[],
        project="zaqar-delay",
        default_config_files=list(settings.config_files),
        default_config_dirs=[],
    )
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
    server, storage, journal = settings.server, settings.storage, settings.journal
    if conf.bind:
        server = dataclasses.replace(server, bind=conf.bind)
    if conf.workers is not None:
        server = dataclasses.replace(server, workers=conf.workers)
    if conf.data_dir:
        storage = dataclasses.replace(storage, data_dir=conf.data_dir)
    if conf.journal_dir:
        journal = dataclasses.replace(journal, path=os.path.abspath(conf.journal_dir))
    return dataclasses.replace(settings, server=server, storage=storage, journal=journal)


def _settings(conf: cfg.ConfigOpts, config_files: tuple[str, ...], env: Any) -> Settings:
    if conf.notification.require_confirmation and not conf.signed_url.secret_key:
        # The confirmation request is a pre-signed URL: without a secret none can be made.
        raise ValueError("[notification] require_confirmation needs [signed_url] secret_key")
    groups = {name: cls(**options_of(cls, conf)) for name, cls in _GROUP_FIELDS.items()}
    settings = Settings(config_files=config_files, **groups, **options_of(Settings, conf))
    storage, server = settings.storage, settings.server
    # Zaqar's [drivers] layout names the store and address where ours are not set. A pooled
    # Zaqar service may name only its management store: the catalog every server shares
    # must be there, not in each server's embedded store.
    zaqar = ZaqarDrivers(**options_of(ZaqarDrivers, conf))
    uri = env.get(STORAGE_URI_ENV) or storage.uri or zaqar.store_uri()
    if not uri and settings.pooling:
        uri = zaqar.catalog_uri()
    bind = zaqar.bind()
    if bind is not None and _unset(conf, "bind", "server"):
        server = dataclasses.replace(server, bind=bind)
    storage = dataclasses.replace(storage, uri=uri)
    return dataclasses.replace(settings, storage=storage, server=server)


def _unset(conf: cfg.ConfigOpts, name: str, group: str) -> bool:
    """Whether no file sets the option (it has its default)."""
    located = conf.get_location(name, group)
    return located is None or located.location == cfg.Locations.opt_default
