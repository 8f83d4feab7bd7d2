"""Where queues live: the one place that says which store serves a queue.

The service asks it once per call, and the push dispatcher asks it for the stores to lease
from; resources never pick a store. Today every queue lives on the one configured store;
pools (a catalog mapping each queue to one of several stores) resolve here, without a change
to the service's callers.
"""

from __future__ import annotations

from zaqar_delay.storage.base import Driver


class Stores:
    """Every store queues can live on, and which one serves each queue."""

    def __init__(self, default: Driver) -> None:
        """``default``: the configured store (``[storage] uri``), which also answers for
        what spans queues (listing and counting a project's queues, health)."""
        self.default = default

    def for_queue(self, project: str, queue: str) -> Driver:
        """The store holding the queue's messages, claims, subscriptions and pushes."""
        return self.default

    def for_project(self, project: str) -> Driver:
        """The store that lists and counts the project's queues."""
        return self.default

    def all(self) -> tuple[Driver, ...]:
        """Each store once: the push dispatcher leases from every one."""
        return (self.default,)
