"""Configuration: every option of the service, declared once, and the typed settings read
from the config files, the command line and the environment.

Each option group is a module of this package (as Zaqar keeps them) declaring a frozen
dataclass whose fields are its options (``options.option``: the oslo.config option named as
the field, and the field's default, in one declaration); :class:`Settings` holds one of each.
The rest of the package never touches ``cfg`` and reads the frozen :class:`Settings`.
"""

from __future__ import annotations

from zaqar_delay.conf.environment import PROMETHEUS_MULTIPROC_ENV, STORAGE_URI_ENV
from zaqar_delay.conf.journal import JournalSettings
from zaqar_delay.conf.metrics import MetricsSettings
from zaqar_delay.conf.notification import NotificationSettings
from zaqar_delay.conf.options import GROUPS, MIB
from zaqar_delay.conf.pooling import CatalogSettings
from zaqar_delay.conf.server import ServerSettings
from zaqar_delay.conf.settings import (
    Settings,
    cli_opts,
    conf_of,
    load_settings,
    make_conf,
    settings_from_command_line,
)
from zaqar_delay.conf.signed_url import SignedUrlSettings
from zaqar_delay.conf.storage import StorageSettings
from zaqar_delay.conf.swift import SwiftSettings
from zaqar_delay.conf.transport import EncryptionSettings, Limits
from zaqar_delay.conf.websocket import WebSocketSettings

__all__ = [
    "GROUPS",
    "MIB",
    "PROMETHEUS_MULTIPROC_ENV",
    "STORAGE_URI_ENV",
    "CatalogSettings",
    "EncryptionSettings",
    "JournalSettings",
    "Limits",
    "MetricsSettings",
    "NotificationSettings",
    "ServerSettings",
    "Settings",
    "SignedUrlSettings",
    "StorageSettings",
    "SwiftSettings",
    "WebSocketSettings",
    "cli_opts",
    "conf_of",
    "load_settings",
    "make_conf",
    "settings_from_command_line",
]
