"""``[storage] replica_acks`` on Redis: a write is answered once that many replicas hold it.

Redis replicates asynchronously; ``WAIT numreplicas timeout`` blocks the connection until the
replicas have acknowledged every write made on that connection so far, and answers how many
did. WAIT does not block inside a script, so it follows the script on the same connection,
sent with it in one packet (``scripts.PooledScript``): one round trip still.

A write that too few replicas confirm is not undone (Redis cannot): the client gets a 503
that says it may still have happened (``errors.WriteNotReplicated``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import redis

from zaqar_delay.errors import WriteNotReplicated
from zaqar_delay.storage.redis.cluster import primary_client_for

LOG = logging.getLogger(__name__)

#: The scripts that only read (``stats`` and ``count`` collect expired messages, which no
#: client waits on): no WAIT after them.
READ_ONLY_SCRIPTS = frozenset(
    {"list", "list_due", "get", "get_claim", "stats", "count", "next_claimable"}
)


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaAcks:
    """How many replicas must confirm each write, and how long a write waits for them."""

    replicas: int = 0
    timeout_s: float = 1.0

    @property
    def required(self) -> bool:
        return self.replicas > 0

    def wait_args(self) -> tuple[str, int, int]:
        """The WAIT command's arguments (its timeout in whole milliseconds, at least 1: 0 would
        wait forever)."""
        return ("WAIT", self.replicas, max(1, round(self.timeout_s * 1000)))

    def check(self, reply: Any, made: list[Any] | None = None) -> None:
        """Raise WriteNotReplicated when WAIT's ``reply`` (as read) counts fewer than the
        replicas required, or is its refusal: by a store demoted to a replica (a failover),
        or by an ACL that no longer grants WAIT to the user, which the answer then says.
        ``made``: the primary's replies to the writes WAIT followed, kept on the error
        (``WriteNotReplicated.replies``: see :func:`made_anyway`)."""
        if isinstance(reply, redis.ResponseError):
            shortfall = (
                f"WAIT, which asks the replicas to confirm it, was refused ({reply}); "
                "a user refused it needs it granted (ACL SETUSER <user> +wait)"
            )
        elif int(reply) < self.replicas:
            shortfall = (
                f"{int(reply)} of the {self.replicas} replicas it must reach confirmed it "
                f"within {self.timeout_s:g} s"
            )
        else:
            return
        refused = WriteNotReplicated(shortfall)
        refused.replies = made
        raise refused


def write_acked(
    client: Any, acks: ReplicaAcks, key: str, write: Callable[[Any], object]
) -> list[Any]:
    """Run the commands ``write`` issues, all on ``key``, in one pipeline and return their
    replies; with replica acks required, on one connection (of the primary serving ``key`` on
    a cluster) followed by WAIT, still one round trip."""
    if not acks.required:
        pipe = client.pipeline(transaction=False)
        write(pipe)
        return list(pipe.execute())
    if not isinstance(client, redis.Redis):  # a cluster: WAIT goes where the key lives
        client = primary_client_for(client, key)
    pipe = client.pipeline(transaction=False)
    write(pipe)
    pipe.execute_command(*acks.wait_args())
    *replies, confirmed = pipe.execute(raise_on_error=False)
    for reply in replies:
        if isinstance(reply, redis.ResponseError):
            raise reply
    acks.check(confirmed)
    return list(replies)


def made_anyway(call: Callable[[], Any], what: str) -> Any:
    """``call``'s reply, also when too few replicas confirmed its write in time: for a write
    that loses data unless answered (a pop removes its messages, and only this answer
    delivers them). The primary made it; a failover that loses it delivers them again,
    which beats never delivering them. Warned of, naming ``what``; any other refusal, or
    one whose replies were not read, is raised."""
    try:
        return call()
    except WriteNotReplicated as exc:
        if exc.replies is None:
            raise
        LOG.warning("%s answered although %s ([storage] replica_acks)", what, exc.shortfall)
        return exc.replies[0]
