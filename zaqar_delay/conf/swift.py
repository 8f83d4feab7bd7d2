"""Zaqar's ``[drivers:message_store:swift]``: the Swift store's access and timings."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

from zaqar_delay.conf.options import option, options
from zaqar_delay.storage.bounds import SWIFT_METADATA_CACHE_MS, SWIFT_SETTLE_MS


@options("drivers:message_store:swift")
@dataclasses.dataclass(frozen=True, slots=True)
class SwiftSettings:
    """The Swift store's access and timings: Zaqar's ``[drivers:message_store:swift]`` options."""

    auth_url: str = option(
        cfg.StrOpt,
        default="",
        help=(
            "For a swift://USER:PASSWORD@/PROJECT storage or pool URI: Keystone v3 "
            "(http://keystone:5000/v3), whose catalog gives the object-store endpoint, or a "
            "tempauth URL ending in /auth/v1.0 (USER is then account:user, percent-encoded "
            "in the URI). A URI's ?auth_url= overrides it."
        ),
    )
    insecure: bool = option(
        cfg.BoolOpt, default=False, help="Do not verify the TLS certificates of Keystone and Swift."
    )
    project_domain_id: str | None = option(
        cfg.StrOpt, help="Keystone v3: the id of the project's domain (instead of its name)."
    )
    project_domain_name: str = option(
        cfg.StrOpt, default="Default", help="Keystone v3: the name of the project's domain."
    )
    user_domain_id: str | None = option(
        cfg.StrOpt, help="Keystone v3: the id of the user's domain (instead of its name)."
    )
    user_domain_name: str = option(
        cfg.StrOpt, default="Default", help="Keystone v3: the name of the user's domain."
    )
    region_name: str | None = option(
        cfg.StrOpt, help="Keystone v3: the region whose object-store endpoint is used."
    )
    interface: str = option(
        cfg.StrOpt,
        default="public",
        choices=["public", "internal", "admin"],
        help="Keystone v3: the interface of the object-store endpoint.",
    )
    settle_ms: int = option(
        cfg.IntOpt,
        default=SWIFT_SETTLE_MS,
        min=1,
        help=(
            "Milliseconds a claim, a dedup id or a new queue waits, beyond its creation's "
            "own round trip, after creating its object before it reads which concurrent creation "
            "Swift kept. Swift's If-None-Match: * does not stop concurrent creations (each "
            "object server checks before it receives the data), so this plus the round trip "
            "must exceed the time an object server takes to commit a small object once it "
            "has accepted it. Must be under 10,000 (the grace other claimers give a taker "
            "before they repair after it); checked at start."
        ),
    )
    metadata_cache_ms: int = option(
        cfg.IntOpt,
        default=SWIFT_METADATA_CACHE_MS,
        min=0,
        help=(
            "Milliseconds a post may use a queue's metadata (its defaults, limits, and whether "
            "it has subscriptions) as its server process last read it from Swift, rather than "
            "reading it for each post. A write of the metadata, a queue's creation or "
            "deletion, and a queue's first subscription wait this long before they answer, so "
            "every post that starts after the answer sees them. 0 reads it for every post. "
            "At most the Swift request timeout (10 s); checked at start."
        ),
    )
    dedup_reclaim: bool = option(
        cfg.BoolOpt,
        default=True,
        help=(
            "Keep dedup records in one chain per day that Swift's object expirer reclaims "
            "once every record in it has expired (ten minutes, [transport] max_message_ttl "
            "and an hour after its day ends). False writes them as "
            "releases before this one did, kept until their queue is purged or deleted: set "
            "it while servers of such a release still use the store (they cannot read the "
            "daily chains), and set it back once every server runs this release. Either way "
            "a server reads both."
        ),
    )
