"""Zaqar's ``[transport]`` options: the v2 API's validation limits and defaults
(:class:`Limits`), and the keys that seal message bodies at rest."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg, types

from zaqar_delay import push_hops
from zaqar_delay.conf.options import option, options

# The largest ttl a stored message keeps (about 136 years): the Redis record holds it in 32
# bits.
MAX_MESSAGE_TTL = 2**32 - 1


@options("transport")
@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """Validation limits and defaults of the v2 API, and the form of its messages: Zaqar's
    ``[transport]`` options, and ``[DEFAULT] enable_checksum``."""

    default_message_ttl: int = option(
        cfg.IntOpt,
        default=3600,
        min=60,
        help="Message ttl when neither the message nor its queue sets one.",
    )
    default_message_delay: int = option(
        cfg.IntOpt,
        default=0,
        min=0,
        help="Shown as _default_message_delay of queues that do not set it.",
    )
    default_claim_ttl: int = option(
        cfg.IntOpt, default=300, min=60, help="Claim ttl when the request omits it."
    )
    default_claim_grace: int = option(
        cfg.IntOpt, default=60, min=60, help="Claim grace when the request omits it."
    )
    max_queues_per_page: int = option(
        cfg.IntOpt, default=20, min=1, help="Largest limit for listing queues."
    )
    max_messages_per_page: int = option(
        cfg.IntOpt,
        default=20,
        min=1,
        help="Largest limit for listing messages and for ids in bulk requests.",
    )
    max_messages_per_claim_or_pop: int = option(
        cfg.IntOpt, default=20, min=1, help="Largest limit of a claim and of a pop."
    )
    max_queue_metadata: int = option(
        cfg.IntOpt, default=65536, min=1, help="Largest queue metadata document, in bytes."
    )
    max_messages_per_post: int = option(
        cfg.IntOpt,
        default=1000,
        min=1,
        help="Most messages one post may hold (Zaqar sets no count, only max_messages_post_size: "
        "a post of tens of thousands of tiny messages answered a Location header proxies "
        "refuse, after storing them).",
    )
    max_push_hops: int = option(
        cfg.IntOpt,
        default=3,
        min=1,
        max=push_hops.MAX_KEPT,
        help="Most pushes of this service a post may come through, one after another (queue to "
        "queue forwarding with a post_data template or a trust+ subscriber; each push sends "
        "X-Zaqar-Delay-Hops; each message of a post after the first counts one more). A post "
        "past it answers 403 and its push fails for good, so a subscription that posts its "
        "queue's messages back to it, directly or through other queues, stops after this many "
        "rounds. Each round may multiply them by the subscriptions that post back: keep it low.",
    )
    max_queues_per_project: int = option(
        cfg.IntOpt,
        default=10000,
        min=0,
        help="Most queues one project may have; creating one more (PUT, or the first post or "
        "subscription of a queue) answers 403. 0: no limit. Checked against the count when a "
        "queue is created, so creations racing each other may pass it by a few.",
    )
    max_messages_per_project: int = option(
        cfg.IntOpt,
        default=1_000_000,
        min=0,
        help="Most messages one project may hold over all its queues and topics, delayed and "
        "claimed ones included, until they are deleted or expire; a post past it answers 403. "
        "0: no limit. Each server process counts a project's messages in the store every "
        "few seconds and adds what it admitted since, so processes posting at once may pass "
        "it by what each may admit between its counts (a sixteenth of what was left, or up "
        "to 100 messages near the limit), and room made by consuming shows within about a "
        "second; expired messages a Redis store has not collected yet may count for a while. "
        "On Redis and MongoDB a message posted with a dedup_id counts until its ttl ends, "
        "deleted or not (its id is remembered until then; a queue counts the larger of its "
        "messages and its remembered ids). The messages a recurring schedule's fires post "
        "count; its ticks (the server's own bookkeeping) do not. Size it for the store: a "
        "message holds its body, and on Redis about 160 bytes more for each push it is owed "
        "until the push is made.",
    )
    max_subscriptions_per_queue: int = option(
        cfg.IntOpt,
        default=20,
        min=0,
        help="Most live subscriptions one queue may have (each message is pushed to each of "
        "them); one more answers 403. 0: no limit.",
    )
    max_subscriptions_per_project: int = option(
        cfg.IntOpt,
        default=200,
        min=0,
        help="Most live subscriptions one project may have over all its queues; one more "
        "answers 403. 0: no limit.",
    )
    max_schedules_per_queue: int = option(
        cfg.IntOpt,
        default=100,
        min=0,
        help="Most recurring schedules one queue or topic may have; one more answers 403. "
        "0: no limit.",
    )
    max_schedules_per_project: int = option(
        cfg.IntOpt,
        default=1000,
        min=0,
        help="Most recurring schedules one project may have over all its queues and topics; "
        "one more answers 403. 0: no limit.",
    )
    min_schedule_interval: int = option(
        cfg.IntOpt,
        default=1,
        min=1,
        help="Shortest interval (seconds) a recurring schedule's every may have.",
    )
    max_messages_post_size: int = option(
        cfg.IntOpt, default=262144, min=1, help="Largest body of a message post, in bytes."
    )
    max_message_ttl: int = option(
        cfg.IntOpt,
        default=1209600,
        min=60,
        max=MAX_MESSAGE_TTL,
        help="Largest message ttl, in seconds.",
    )
    max_message_delay: int = option(
        cfg.IntOpt,
        default=900,
        min=0,
        help="Largest message delay and queue _default_message_delay, in seconds.",
    )
    deliver_at_tolerance: float = option(
        cfg.FloatOpt,
        default=5.0,
        min=0.0,
        help="Seconds a deliver_at time may lie in the past (clock skew) before it is refused.",
    )
    max_claim_wait: int = option(
        cfg.IntOpt,
        default=20,
        min=0,
        help="Longest wait, in seconds, a claim may ask for with ?wait= before answering 204.",
    )
    max_waiting_claims_per_project: int = option(
        cfg.IntOpt,
        default=100,
        min=0,
        help="Most claims of one project that may wait (?wait=) at once in one server process; "
        "one more claims what it can at once, and answers 429 with Retry-After when it finds "
        "nothing. Each waiting claim holds one of the process's connections (1,000 per worker), "
        "so this keeps one project's waiting claims from taking all of them. 0: no limit.",
    )
    max_claim_ttl: int = option(
        cfg.IntOpt, default=43200, min=60, help="Largest claim ttl, in seconds."
    )
    max_claim_grace: int = option(
        cfg.IntOpt, default=43200, min=60, help="Largest claim grace, in seconds."
    )
    max_pools_per_page: int = option(
        cfg.IntOpt, default=20, min=1, help="Largest limit for listing pools."
    )
    max_flavors_per_page: int = option(
        cfg.IntOpt, default=20, min=1, help="Largest limit for listing flavors."
    )
    default_subscription_ttl: int = option(
        cfg.IntOpt,
        default=3600,
        min=60,
        help="Subscription ttl, in seconds, when the request omits it.",
    )
    max_subscriptions_per_page: int = option(
        cfg.IntOpt, default=20, min=1, help="Largest limit for listing subscriptions."
    )
    subscriber_types: tuple[str, ...] = option(
        cfg.ListOpt,
        default=["http", "https", "mailto", "trust+http", "trust+https"],
        item_type=types.String(choices=["http", "https", "mailto", "trust+http", "trust+https"]),
        help=(
            "URI schemes a subscriber may have. trust+http(s) subscribers are pushed with a "
            "token of the subscribing user, through a Keystone trust to the [trustee] "
            "service user (auth_strategy = keystone; without [trustee], with no token)."
        ),
        convert=tuple,
    )
    enable_checksum: bool = option(
        cfg.BoolOpt,
        group="DEFAULT",
        default=False,
        help=(
            'Show each message\'s "checksum", as Zaqar: "MD5:" and the MD5 of its body as JSON '
            "(Python's json.dumps, default separators), computed from the body as it is read."
        ),
    )
    client_id_uuid_safe: str = option(
        cfg.StrOpt,
        default="strict",
        choices=["strict", "off"],
        help="strict: the Client-ID header must be a UUID. off: any string of allowed length.",
    )
    min_length_client_id: int = option(
        cfg.IntOpt, default=10, min=1, help="Shortest Client-ID when client_id_uuid_safe is off."
    )
    max_length_client_id: int = option(
        cfg.IntOpt, default=36, min=1, help="Longest Client-ID when client_id_uuid_safe is off."
    )
    message_delete_with_claim_id: bool = option(
        cfg.BoolOpt, default=False, help="Bulk delete requires claim_ids that hold the messages."
    )


@options("transport")
@dataclasses.dataclass(frozen=True, slots=True)
class EncryptionSettings:
    """Message bodies sealed at rest: the ``[transport]`` encryption options."""

    key: str = option(
        cfg.StrOpt,
        name="message_encryption_key",
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
    old_keys: tuple[str, ...] = option(
        cfg.ListOpt,
        name="message_encryption_old_keys",
        default=[],
        secret=True,
        help=(
            "Earlier values of message_encryption_key, still accepted for reading bodies "
            "encrypted before a key rotation. New bodies always use message_encryption_key."
        ),
        convert=tuple,
    )
