"""The pooling catalog as a store keeps it: registered pools, flavors, and which pool each
queue lives on.

The catalog lives in the default store (``[storage] uri``); ``pooling.catalog`` validates what
the admin API asks and caches what the service reads. Records are kept as the admin gave them;
every method is one or two store round trips.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True, slots=True)
class PoolRecord:
    """A registered store: its URI, its share of new queues, its flavor, driver options."""

    name: str
    uri: str
    weight: int
    flavor: str | None = None
    options: dict[str, Any] = dataclasses.field(default_factory=dict)

    def document(self) -> dict[str, Any]:
        return {"u": self.uri, "w": self.weight, "f": self.flavor, "o": self.options}

    @classmethod
    def from_document(cls, name: str, doc: dict[str, Any]) -> PoolRecord:
        return cls(name, doc["u"], int(doc["w"]), doc.get("f"), dict(doc.get("o") or {}))


@dataclasses.dataclass(frozen=True, slots=True)
class FlavorRecord:
    """A named list of pools a queue may ask for (``_flavor``)."""

    name: str
    pool_list: tuple[str, ...]

    def document(self) -> dict[str, Any]:
        return {"p": list(self.pool_list)}

    @classmethod
    def from_document(cls, name: str, doc: dict[str, Any]) -> FlavorRecord:
        return cls(name, tuple(doc.get("p") or ()))


class CatalogStore(abc.ABC):
    """Pools, flavors and queue placements in one store.

    ``generation`` changes whenever something a process may have cached stops being true: a
    queue leaves the catalog, a pool or flavor changes or goes. Placing a queue does not change
    it (a process that has not cached a queue asks the store).
    """

    # -- pools and flavors ---------------------------------------------------------------------

    @abc.abstractmethod
    def put_pool(self, pool: PoolRecord) -> None:
        """Create or replace the pool (and move the generation on)."""

    @abc.abstractmethod
    def get_pool(self, name: str) -> PoolRecord | None: ...

    @abc.abstractmethod
    def list_pools(self, marker: str | None, limit: int | None) -> list[PoolRecord]:
        """Pools in name order after ``marker``; every pool when ``limit`` is None."""

    @abc.abstractmethod
    def delete_pool(self, name: str) -> None:
        """Forget the pool and every queue placed on it (and move the generation on)."""

    @abc.abstractmethod
    def put_flavor(self, flavor: FlavorRecord) -> None: ...

    @abc.abstractmethod
    def get_flavor(self, name: str) -> FlavorRecord | None: ...

    @abc.abstractmethod
    def list_flavors(self, marker: str | None, limit: int | None) -> list[FlavorRecord]: ...

    @abc.abstractmethod
    def delete_flavor(self, name: str) -> None: ...

    # -- queue placements ----------------------------------------------------------------------

    @abc.abstractmethod
    def place_queue(self, project: str, queue: str, pool: str) -> str:
        """Place the queue on ``pool`` unless it is placed already; returns the pool it is on
        (so two processes placing one queue at once agree). A queue removed within its
        ``sticky_ms`` (:meth:`remove_queue`) goes back to the pool it was on instead, if that
        pool is still registered."""

    @abc.abstractmethod
    def lookup_queue(self, project: str, queue: str) -> str | None:
        """The pool the queue is placed on, or None."""

    @abc.abstractmethod
    def remove_queue(self, project: str, queue: str, sticky_ms: int = 0) -> None:
        """Forget the queue's placement (and move the generation on). For ``sticky_ms`` the
        pool is remembered: a process whose cache still names it may write the queue there
        until it reads the new generation, so the queue, if created again meanwhile, must
        be placed there too."""

    @abc.abstractmethod
    def list_queues(self, project: str, marker: str | None, limit: int) -> list[tuple[str, str]]:
        """``(queue, pool)`` of the project's placed queues in name order after ``marker``."""

    @abc.abstractmethod
    def count_queues(self, project: str) -> int: ...

    @abc.abstractmethod
    def queues_on_pool(self, pool: str) -> int:
        """How many queues are placed on the pool."""

    @abc.abstractmethod
    def generation(self) -> int:
        """A number that changes when cached placements may have become wrong."""
