"""Where queues live: the one place that says which store serves a queue.

The service asks it once per call, and the push dispatcher asks it for the stores to lease
from; resources never pick a store. Without pooling every queue lives on the configured
store. With pooling (:class:`PooledStores`) a catalog in the configured store maps each queue to
one of the pools an admin registered, placed when the queue is first written.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from zaqar_delay import errors
from zaqar_delay.models import Metadata, QueueInfo
from zaqar_delay.placement import Placement, by_weight
from zaqar_delay.pooling.registry import VIRTUAL_POOL
from zaqar_delay.silent_pools import SilentPools
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.catalog import CatalogStore, PoolRecord

# Placements one process remembers (forgotten all at once when full).
PLACEMENT_CACHE_SIZE = 100_000
# The name of the configured store ([storage] uri) among the stores, beside the pools'.
DEFAULT_STORE = "default"
# Seconds a pool's driver replaced by a changed record stays open: requests that took it
# before the change finish on it.
RETIRED_DRIVER_GRACE_S = 30.0
# Beyond two catalog refresh periods, how long a deleted queue stays bound to its pool.
STICKY_MARGIN_S = 1.0


class Upkeep(Protocol):
    """Keeps the stores of registered pools a process started running, and stops them at
    its end."""

    def keep_running(self, registered: Iterable[PoolRecord]) -> None: ...

    def close(self) -> None: ...


class Stores:
    """Every store queues can live on, and which one serves each queue."""

    def __init__(self, default: Driver) -> None:
        """``default``: the configured store (``[storage] uri``), which also answers for
        what spans queues (health)."""
        self.default = default

    def for_queue(self, project: str, queue: str) -> Driver:
        """The store holding the queue's messages, claims, subscriptions and pushes (for a
        queue that does not exist: a store that answers so)."""
        return self.default

    def place(self, project: str, queue: str, flavor: str | None = None) -> Driver:
        """The store of a queue about to be written, placing it first if it is new (within
        the pools of ``flavor``, when given)."""
        return self.default

    def forget(self, project: str, queue: str) -> None:
        """The queue was deleted: it may be placed anew when next written."""

    def colocate(self, project: str, queue: str, companion: str) -> None:
        """Place ``companion`` (a dead-letter queue about to get ``queue``'s messages, a queue
        of its schedules) on ``queue``'s pool if it is placed nowhere. One that lives on
        another pool stays there (dead letters are copied, ``Driver.receive_dead_letters``)."""

    def pool_of(self, project: str, queue: str) -> str | None:
        """The name of the pool the queue is placed on; None unpooled or when not placed."""
        return None

    def placed(self, project: str, queue: str) -> bool:
        """Whether the queue has a store (always, unpooled; with pools, once placed)."""
        return True

    def queues_per_pool(self) -> dict[str, int]:
        """How many queues each pool holds (none unpooled): one catalog read per pool."""
        return {}

    def list_queues(
        self, project: str, marker: str | None, limit: int, detailed: bool
    ) -> list[QueueInfo]:
        """The project's queues in name order after ``marker``."""
        return self.default.list_queues(project, marker, limit, detailed)

    def count_queues(self, project: str) -> int:
        return self.default.count_queues(project)

    def count_messages(self, project: str, most: int, now_ms: int) -> int:
        """The project's messages over every store, up to ``most`` at least
        (``Driver.count_messages``). A store that does not answer counts none: with a pool
        away, a project may pass its message quota rather than every post being refused."""
        counted = 0
        for driver in self.all():
            if counted >= most:
                break
            with contextlib.suppress(errors.StorageUnavailable):
                counted += driver.count_messages(project, most - counted, now_ms)
        return counted

    def all(self) -> tuple[Driver, ...]:
        """Each store once: the push dispatcher leases from every one."""
        return tuple(driver for _, driver in self.named())

    def named(self) -> tuple[tuple[str, Driver], ...]:
        """Each store once with its name: ``default`` for the configured store, a pool's
        name for a pool's; with pooling, less the pools that did not answer lately."""
        return ((DEFAULT_STORE, self.default),)

    def reachability(self) -> dict[str, bool]:
        """Whether each store answers now, by name, ``default`` first: every pool's
        registered, asked whether or not it answered lately."""
        return {name: driver.ping() for name, driver in self.named()}

    def reachable(self) -> bool:
        """Whether every store answers (the ping route, which anyone may call)."""
        return all(driver.ping() for _, driver in self.named())

    def did_not_answer(self, name: str) -> None:
        """The store ``name`` (of :meth:`named`) did not answer: with pooling, a pool is
        left out of :meth:`named` and of placements for a while."""

    def close(self) -> None:
        """Close the stores this object opened (not the default store)."""


class PooledStores(Stores):
    """Queues on pools: the catalog (kept in the default store) says which pool each queue is
    on, and this process caches what it read.

    The cache holds until the catalog's generation moves (a queue deleted, a pool or flavor
    changed), read at most every ``refresh_s``: in the common case a request costs no
    catalog round trip. A queue is placed once, by weight among the pools of its flavor (or
    the pools of no flavor) whose store answers (``placement.py``), and never moves while it
    exists.
    """

    def __init__(
        self,
        default: Driver,
        catalog: CatalogStore,
        open_pool: Callable[[PoolRecord], Driver],
        refresh_s: float,
        virtual_pool: bool = False,
        choose: Callable[[list[PoolRecord]], PoolRecord] | None = None,
        upkeep: Upkeep | None = None,
    ) -> None:
        """``open_pool(record)``: a driver on the pool's store. ``virtual_pool``: while no pool
        is registered, place queues on the default store. ``choose``: picks among candidate
        pools (by default at random in proportion to weight). ``upkeep``: what keeps the
        pools' embedded stores running (its ``keep_running`` runs at each catalog check)."""
        super().__init__(default)
        self.catalog = catalog
        self.open_pool = open_pool
        self._upkeep = upkeep
        self._refresh_s = refresh_s
        self._virtual_pool = virtual_pool
        self._silent = SilentPools()
        self._placement = Placement(choose or by_weight, self._answers, self._silent)
        self._lock = threading.Lock()
        self._opening = threading.Lock()
        self._placed: dict[tuple[str, str], str] = {}
        self._records: dict[str, PoolRecord] | None = None
        self._drivers: dict[str, tuple[PoolRecord, Driver]] = {}
        self._retired: list[tuple[float, Driver]] = []  # (when replaced, driver)
        self._generation: int | None = None
        self._checked_at = float("-inf")

    # -- the cache -----------------------------------------------------------------------------

    def _refresh(self) -> None:
        """Drop what the process cached if the catalog changed since it was read."""
        now = time.monotonic()
        if now - self._checked_at < self._refresh_s:
            return
        if self._retired and now - self._retired[0][0] >= RETIRED_DRIVER_GRACE_S:
            self._close_retired(now)
        generation = self.catalog.generation()
        with self._lock:
            changed = generation != self._generation
            if changed:
                self._placed.clear()
                self._records = None
                self._generation = generation
            self._checked_at = now
        if changed:
            self._retire_deleted(now)
        if self._upkeep is not None:
            self._upkeep.keep_running(self.pools().values())

    def _retire_deleted(self, now: float) -> None:
        """Retire the drivers of pools no longer registered (closed after the grace)."""
        registered = self.pools()
        with self._opening:
            for name in [n for n in self._drivers if n not in registered]:
                self._retired.append((now, self._drivers.pop(name)[1]))

    def invalidate(self) -> None:
        """Forget everything cached (this process changed the catalog)."""
        with self._lock:
            self._placed.clear()
            self._records = None
            self._checked_at = float("-inf")

    def pools(self, fresh: bool = False) -> dict[str, PoolRecord]:
        """The registered pools by name (cached; read again when ``fresh``)."""
        records = self._records
        if records is None or fresh:
            records = {p.name: p for p in self.catalog.list_pools(None, None)}
            self._records = records
        return records

    def _driver(self, pool: str) -> Driver:
        record = self.pools().get(pool)
        if record is None:
            # Registered since this process read the pools (another process placed a queue
            # on it): read them again rather than wait for the generation check.
            record = self.pools(fresh=True).get(pool)
        if record is None:
            if pool == VIRTUAL_POOL:
                return self.default
            raise errors.StorageUnavailable(f"pool {pool} is not registered any more")
        known = self._drivers.get(pool)
        if known is not None and _same_store(known[0], record):
            return known[1]  # the common case: no lock
        # Opened under the lock: two drivers of one pool would split its waiting claims.
        with self._opening:
            known = self._drivers.get(pool)
            if known is not None and _same_store(known[0], record):
                return known[1]
            driver = self.open_pool(record)
            if known is not None:  # the pool's record changed: its old driver retires
                self._retired.append((time.monotonic(), known[1]))
            self._drivers[pool] = (record, driver)
            return driver

    def _close_retired(self, now: float) -> None:
        with self._opening:
            due = [d for at, d in self._retired if now - at >= RETIRED_DRIVER_GRACE_S]
            self._retired = [r for r in self._retired if now - r[0] < RETIRED_DRIVER_GRACE_S]
        for driver in due:
            driver.close()

    def close(self) -> None:
        with self._opening:
            for _, driver in self._drivers.values():
                driver.close()
            for _, driver in self._retired:
                driver.close()
            self._drivers.clear()
            self._retired.clear()
        if self._upkeep is not None:
            self._upkeep.close()

    def _remember(self, project: str, queue: str, pool: str) -> None:
        with self._lock:
            if len(self._placed) >= PLACEMENT_CACHE_SIZE:
                self._placed.clear()
            self._placed[(project, queue)] = pool

    # -- Stores --------------------------------------------------------------------------------

    def pool_of(self, project: str, queue: str) -> str | None:
        self._refresh()
        pool = self._placed.get((project, queue))
        if pool is None:
            pool = self.catalog.lookup_queue(project, queue)
            if pool is not None:
                self._remember(project, queue, pool)
        return pool

    def placed(self, project: str, queue: str) -> bool:
        return self.pool_of(project, queue) is not None

    def for_queue(self, project: str, queue: str) -> Driver:
        pool = self.pool_of(project, queue)
        # A queue placed nowhere does not exist: the default store answers so.
        return self.default if pool is None else self._driver(pool)

    def place(self, project: str, queue: str, flavor: str | None = None) -> Driver:
        pool = self.pool_of(project, queue)
        if pool is None:
            chosen = self._choose_pool(flavor)
            pool = self.catalog.place_queue(project, queue, chosen)
            self._remember(project, queue, pool)
        return self._driver(pool)

    def _choose_pool(self, flavor: str | None) -> str:
        if flavor is not None and self.catalog.get_flavor(flavor) is None:
            raise errors.InvalidRequest(f"Flavor {flavor} does not exist")
        # A pool or flavor an admin has just set up may not be in this process's cache yet:
        # the pools are read again before answering that none takes the queue.
        for fresh in (False, True):
            registered = list(self.pools(fresh).values())
            candidates = [p for p in registered if p.flavor == flavor and p.weight > 0]
            if candidates:
                return self._placement.choose(candidates)
        if not registered and self._virtual_pool and flavor is None:
            return VIRTUAL_POOL
        wanted = f"of flavor {flavor}" if flavor else "without a flavor"
        raise errors.NoPoolFound(f"No pool {wanted} takes new queues.")

    def _answers(self, pool: str) -> bool:
        try:
            return self._driver(pool).unreachable_reason() is None
        except errors.ZaqarDelayError:  # not registered any more, or cannot be opened
            return False

    def silent_pools(self) -> set[str]:
        """The pools this process leaves alone now, their store not answering."""
        return self._silent.now()

    def did_not_answer(self, name: str) -> None:
        if name != DEFAULT_STORE:
            self._silent.did_not_answer(name)

    def reachable(self) -> bool:
        # False at once while a pool is left alone: a flood of pings, which need no
        # credentials, waits on no store that does not answer.
        if self._silent.now():
            return False
        named = self.named()  # a pool that cannot be opened now is left alone
        if self._silent.now():
            return False
        for name, driver in named:
            if not driver.ping():
                self.did_not_answer(name)
                return False
        return True

    def reachability(self) -> dict[str, bool]:
        found = {DEFAULT_STORE: self.default.ping()}
        try:
            registered = self.pools()
        except errors.ZaqarDelayError:  # the catalog's store does not answer: none known
            return found
        for name in registered:
            found[name] = self._silent.heard(name, self._answers(name))
        return found

    def colocate(self, project: str, queue: str, companion: str) -> None:
        pool = self.pool_of(project, queue)
        if pool is None:
            return
        if self.pool_of(project, companion) is None:
            placed = self.catalog.place_queue(project, companion, pool)
            self._remember(project, companion, placed)

    def forget(self, project: str, queue: str) -> None:
        # Until every process has read the new generation, one may still write the queue on
        # its old pool: created again meanwhile, it goes back there.
        sticky_ms = int((2 * self._refresh_s + STICKY_MARGIN_S) * 1000)
        self.catalog.remove_queue(project, queue, sticky_ms)
        with self._lock:
            self._placed.pop((project, queue), None)

    def list_queues(
        self, project: str, marker: str | None, limit: int, detailed: bool
    ) -> list[QueueInfo]:
        placed = self.catalog.list_queues(project, marker, limit)
        if not detailed:
            return [QueueInfo(name, None) for name, _ in placed]
        found: dict[str, Metadata | None] = {}
        for pool in dict.fromkeys(pool for _, pool in placed):  # one read per pool
            names = [name for name, on in placed if on == pool]
            read = self._driver(pool).get_metadata_many(project, names)
            found.update(zip(names, read, strict=True))
        return [QueueInfo(name, found[name] or {}) for name, _ in placed]

    def count_queues(self, project: str) -> int:
        return self.catalog.count_queues(project)

    def queues_per_pool(self) -> dict[str, int]:
        self._refresh()
        names = [*self.pools(), *([VIRTUAL_POOL] if self._virtual_pool else [])]
        return {name: self.catalog.queues_on_pool(name) for name in dict.fromkeys(names)}

    def named(self) -> tuple[tuple[str, Driver], ...]:
        self._refresh()
        # Keyed by driver: a pool whose driver is the default store's is that store.
        first = {id(self.default): (DEFAULT_STORE, self.default)}
        silent = self._silent.now()
        for name in self.pools():
            if name in silent:
                continue
            try:
                driver = self._driver(name)
            except errors.ZaqarDelayError:  # its store did not answer when opened
                self._silent.did_not_answer(name)
                continue
            first.setdefault(id(driver), (name, driver))
        return tuple(first.values())


def _same_store(a: PoolRecord, b: PoolRecord) -> bool:
    """Whether a driver opened for ``a`` serves ``b`` (a new weight or flavor keeps it)."""
    return (a.uri, a.options) == (b.uri, b.options)
