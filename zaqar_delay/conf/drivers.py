"""Zaqar's ``[drivers]`` layout, read so that a Zaqar configuration file keeps naming its store
and its address: ``[drivers] message_store`` with the ``uri`` of its
``[drivers:message_store:<driver>]`` group, and ``[drivers:transport:wsgi]`` ``bind`` and
``port``. zaqar-delay's own options win where they are set (``[storage] uri``, ``[server]
bind``); what Zaqar stored is not read (zaqar-delay keeps its own keys, collections and
containers)."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

from zaqar_delay.conf.options import option, options

REDIS = "drivers:message_store:redis"
MONGODB = "drivers:message_store:mongodb"
SWIFT = "drivers:message_store:swift"
WSGI = "drivers:transport:wsgi"
_TAKEN = "Read only when [storage] uri is empty and [drivers] message_store names this driver."


@options("drivers")
@dataclasses.dataclass(frozen=True, slots=True)
class ZaqarDrivers:
    """Zaqar's choice of message store and address, as its configuration files write them."""

    message_store: str | None = option(
        cfg.StrOpt,
        choices=["redis", "mongodb", "swift"],
        help=(
            "Zaqar's message store option, read when [storage] uri is empty: the store the "
            "uri of [drivers:message_store:<driver>] names. Unset, a "
            "[drivers:message_store:mongodb] uri still names the store (Zaqar's default "
            "driver); without either, [storage] uri decides (empty: the embedded Redis)."
        ),
    )
    redis_uri: str = option(
        cfg.StrOpt,
        name="uri",
        group=REDIS,
        default="redis://127.0.0.1:6379",
        secret=True,
        help=f"Zaqar's Redis store, written as for [storage] uri. {_TAKEN}",
    )
    mongodb_uri: str | None = option(
        cfg.StrOpt,
        name="uri",
        group=MONGODB,
        secret=True,
        help=(
            "Zaqar's MongoDB store. Read when [storage] uri is empty and [drivers] "
            "message_store is mongodb or unset. The data goes to [storage] database (or the "
            "URI's), never to Zaqar's database option, so Zaqar's collections are not mixed "
            "with zaqar-delay's."
        ),
    )
    swift_uri: str | None = option(
        cfg.StrOpt,
        name="uri",
        group=SWIFT,
        secret=True,
        help=f"Zaqar's Swift store, swift://USER:PASSWORD@/PROJECT. {_TAKEN}",
    )
    wsgi_bind: str | None = option(
        cfg.HostAddressOpt,
        name="bind",
        group=WSGI,
        help="Zaqar's listening address, read when [server] bind is not set (127.0.0.1).",
    )
    wsgi_port: int | None = option(
        cfg.PortOpt,
        name="port",
        group=WSGI,
        help="Zaqar's listening port, read when [server] bind is not set (8888).",
    )

    def store_uri(self) -> str:
        """The store Zaqar's options name ("" for none); ValueError when the driver they
        choose has no URI."""
        driver = self.message_store or ("mongodb" if self.mongodb_uri else None)
        if driver is None:
            return ""
        uri = {"redis": self.redis_uri, "mongodb": self.mongodb_uri, "swift": self.swift_uri}
        if not uri[driver]:
            group = {"mongodb": MONGODB, "swift": SWIFT}[driver]
            raise ValueError(f"[drivers] message_store = {driver} needs [{group}] uri")
        return str(uri[driver])

    def bind(self) -> str | None:
        """``HOST:PORT`` from Zaqar's address options (None when neither is set)."""
        if self.wsgi_bind is None and self.wsgi_port is None:
            return None
        host = self.wsgi_bind or "127.0.0.1"
        return f"{f'[{host}]' if ':' in host else host}:{self.wsgi_port or 8888}"
