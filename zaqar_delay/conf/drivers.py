"""Zaqar's ``[drivers]`` layout, read so that a Zaqar configuration file keeps naming its store
and its address: ``[drivers] message_store`` with the ``uri`` of its
``[drivers:message_store:<driver>]`` group; for a pooled service that names no message store,
``[drivers] management_store`` with the ``uri`` of its ``[drivers:management_store:<driver>]``
group, where Zaqar keeps the pool catalog; and ``[drivers:transport:wsgi]`` ``bind`` and
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
MANAGEMENT_REDIS = "drivers:management_store:redis"
MANAGEMENT_MONGODB = "drivers:management_store:mongodb"
MANAGEMENT_SQL = "drivers:management_store:sqlalchemy"
WSGI = "drivers:transport:wsgi"
_TAKEN = "Read only when [storage] uri is empty and [drivers] message_store names this driver."
_MANAGED = (
    "Read only with pooling, when neither [storage] uri nor Zaqar's message store options name "
    "a store, and [drivers] management_store names this driver: the pool catalog's store."
)


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
    management_store: str | None = option(
        cfg.StrOpt,
        choices=["mongodb", "redis", "sqlalchemy"],
        help=(
            "Zaqar's management store option, read with pooling when neither [storage] uri nor "
            "Zaqar's message store options name a store: the pool catalog (and, with "
            "enable_virtual_pool, the virtual pool) is kept in the store the uri of "
            "[drivers:management_store:<driver>] names. Unset, a "
            "[drivers:management_store:mongodb] uri names it (Zaqar's default driver). "
            "sqlalchemy stops the server at start: the catalog needs a Redis, MongoDB or Swift "
            "store, set in [storage] uri."
        ),
    )
    management_redis_uri: str = option(
        cfg.StrOpt,
        name="uri",
        group=MANAGEMENT_REDIS,
        default="redis://127.0.0.1:6379",
        secret=True,
        help=f"Zaqar's Redis management store, written as for [storage] uri. {_MANAGED}",
    )
    management_mongodb_uri: str | None = option(
        cfg.StrOpt,
        name="uri",
        group=MANAGEMENT_MONGODB,
        secret=True,
        help=(
            f"Zaqar's MongoDB management store. {_MANAGED} The data goes to [storage] database "
            "(or the URI's), never to Zaqar's database option."
        ),
    )
    management_sql_uri: str | None = option(
        cfg.StrOpt,
        name="uri",
        group=MANAGEMENT_SQL,
        secret=True,
        help="Zaqar's SQL management store: never read (zaqar-delay keeps no data in SQL).",
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

    def catalog_uri(self) -> str:
        """The store Zaqar's management options name, for a pooled service whose store
        nothing else names ("" for none); ValueError when they choose SQL, or a driver
        without its URI."""
        driver = self.management_store or ("mongodb" if self.management_mongodb_uri else None)
        if driver is None:
            return ""
        if driver == "sqlalchemy":
            raise ValueError(
                "[drivers] management_store = sqlalchemy: zaqar-delay keeps the pool catalog "
                "in Redis, MongoDB or Swift; set [storage] uri to that store"
            )
        if driver == "mongodb" and not self.management_mongodb_uri:
            raise ValueError(
                f"[drivers] management_store = mongodb needs [{MANAGEMENT_MONGODB}] uri"
            )
        return str(
            self.management_mongodb_uri if driver == "mongodb" else self.management_redis_uri
        )

    def bind(self) -> str | None:
        """``HOST:PORT`` from Zaqar's address options (None when neither is set)."""
        if self.wsgi_bind is None and self.wsgi_port is None:
            return None
        host = self.wsgi_bind or "127.0.0.1"
        return f"{f'[{host}]' if ':' in host else host}:{self.wsgi_port or 8888}"
