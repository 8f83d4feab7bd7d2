"""What a store tells about itself beyond the storage contract: the durability of an
acknowledged write (``Durability``), and how it wakes waiting claims (``Wakeups``)."""

from __future__ import annotations

import abc
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

#: What a write the store acknowledged may survive, in the order of the manual's durability
#: table.
FAULTS = ("process crash", "power loss", "machine loss", "failover")

#: Called with the channel (``Wakeups.channel``) a wake-up arrived under.
OnWake = Callable[[str], None]
#: Called once the listener is connected again after an outage (wake-ups may be lost).
OnReconnect = Callable[[], None]


@dataclasses.dataclass(frozen=True, slots=True)
class Durability:
    """The durability in force, as the store reports its own configuration.

    ``survives`` names the ``FAULTS`` an acknowledged write survives; ``facts`` are what the
    judgement was made from (append-only file and fsync, connected replicas, write concern).
    "machine loss" assumes replicas run on other machines, which the store cannot tell.
    """

    store: str
    replica_acks: int
    survives: tuple[str, ...]
    facts: dict[str, Any]

    def summary(self) -> str:
        """One line for the server's log."""
        lost = [fault for fault in FAULTS if fault not in self.survives]
        return (
            f"{self.store} store, replica_acks = {self.replica_acks}: an acknowledged write "
            f"survives {', '.join(self.survives) or 'none of the faults below'}"
            + (f"; not {', '.join(lost)}" if lost else "")
        )


class Wakeups(abc.ABC):
    """How a store tells waiting claims, in any server process, that a queue may have a
    message to claim (one was posted, released or rescheduled)."""

    @abc.abstractmethod
    def channel(self, project: str, queue: str) -> str:
        """The name wake-ups for this queue arrive under."""

    @abc.abstractmethod
    def announce(self, project: str, queue: str, ttl_ms: int) -> None:
        """Ask writers to send wake-ups for this queue for the next ``ttl_ms``."""

    @abc.abstractmethod
    def listen(self, on_wake: OnWake, on_reconnect: OnReconnect, stop: threading.Event) -> None:
        """Call ``on_wake(channel)`` for every wake-up until ``stop`` is set; reconnect by
        itself after a store outage and then call ``on_reconnect`` (wake-ups may be lost)."""
