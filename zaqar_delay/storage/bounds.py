"""The bounds of the storage contract's protocols, written once for every driver.

Each driver implements the same protocols (listing with a scan budget, claiming against
concurrent claimers, dedup reservation, push leasing, dispatch rates); the numbers that bound
them are the contract's, not a driver's, so they live here. The Redis scripts get the ones they
use through the generated prelude (``storage/redis/layout.py``); ``conf.py`` takes the Swift
defaults from here, without importing the Swift driver (an extra)."""

from __future__ import annotations

# Entries (index entries, documents) one listing call may examine before it returns a short
# page; a claim examines at most as many per round.
LIST_SCAN_BUDGET = 2000

# Rounds a claim makes when concurrent claimers take its candidates first.
CLAIM_ATTEMPTS = 5

# Rounds a claim makes on a store that cannot take the oldest claimable message atomically
# (Swift): N claims racing for the last N messages each lose most rounds.
CONTENDED_CLAIM_ROUNDS = 20

# How many times more of the oldest claimable messages than it wants a claim that lost some to
# concurrent claims lists (again after each lost round), to try a random choice of them.
CONTENDED_SPREAD = 4

# Due pushes looked at per lease beyond its limit, so a subscription at its limits does not
# hide the pushes of the others behind it.
SCAN_EXTRA = 100

# Compare-and-set attempts at a rate's next free time before a push waits for the next lease.
RATE_ATTEMPTS = 8

# How long the post that reserved a dedup id may still be storing its message (MongoDB's;
# Swift's is its orphan grace, ``SwiftTimes.first_post_grace_ms``), and how often a repeat
# waiting for it looks.
FIRST_POST_GRACE_MS = 10_000
FIRST_POST_POLL_S = 0.05
# How long a repeat waits for a first post in one request; a grace longer than this is waited
# out over several requests, each answered 503 with Retry-After.
FIRST_POST_WAIT_MS = 10_000

# How far apart the clocks of two servers sharing a store may be. A record's time is read on
# the clock of the post that made it and judged on another's: a repeat takes a first post's
# record for dead without waiting only when it is older than the grace by this much, and
# otherwise waits out the grace on its own watch (``storage.dedup_reservation``).
CLOCK_DISAGREEMENT_MS = 60_000

# Swift's defaults ([drivers:message_store:swift]): how long after a create-only write an
# object server may still commit a concurrent one (settle_ms), and how long a post may use the
# queue's metadata object as its process last read it (metadata_cache_ms).
SWIFT_SETTLE_MS = 100
SWIFT_METADATA_CACHE_MS = 250
