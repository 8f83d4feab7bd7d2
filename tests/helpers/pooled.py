"""The storage contract through pooling: a driver whose every queue lives on a pool.

``PooledDriver`` answers the ``Driver`` calls of the contract suite the way the service makes
them when pooled: each per-queue call goes to the store ``PooledStores`` resolves for the
queue, placing the queue first when the call may create it; a queue's dead-letter queue, if
placed nowhere, is placed on its pool when the first dead letters move; deleting a queue forgets its placement; listing and counting come from the
catalog. The pools are real stores: a redis-server and MongoDB, each on a namespace of its
own, with the catalog on the embedded store.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.helpers.stores import STORES, close_test_driver, open_test_driver, store_url
from zaqar_delay.models import ClaimTimes, OverLimit
from zaqar_delay.storage import dead_letters
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.catalog import PoolRecord
from zaqar_delay.stores import PooledStores

# Calls that may create the queue they name: its placement comes first.
PLACING = frozenset({"create_queue", "post_messages", "post_if_current", "create_subscription"})
# Calls that span queues, or concern no queue: answered by the catalog or the default store.
SPANNING = frozenset({"list_queues", "count_queues", "ping", "prepare", "close"})


class PooledDriver:
    """A ``Driver`` stand-in routing every per-queue call to the queue's pool."""

    def __init__(self, stores: PooledStores) -> None:
        self.stores = stores

    def pools_used(self, project: str, queues: list[str]) -> set[str | None]:
        return {self.stores.pool_of(project, queue) for queue in queues}

    def wakeups_of(self, project: str, *queues: str) -> Any:
        """The wake-ups of the store the first queue is placed on; the others are placed on
        the same pool (a store's wake-ups cover only its own queues)."""
        store = self.stores.place(project, queues[0])
        pool = self.stores.pool_of(project, queues[0])
        assert pool is not None
        for queue in queues[1:]:
            assert self.stores.catalog.place_queue(project, queue, pool) == pool
        return store.wakeups()

    def list_queues(self, project: str, marker: str | None, limit: int, detailed: bool) -> Any:
        return self.stores.list_queues(project, marker, limit, detailed)

    def count_queues(self, project: str) -> int:
        return self.stores.count_queues(project)

    def count_messages(self, project: str, most: int, now_ms: int) -> int:
        return self.stores.count_messages(project, most, now_ms)

    def create_queue(self, project: str, queue: str, metadata: Any, now_ms: int) -> bool:
        return self.stores.place(project, queue).create_queue(project, queue, metadata, now_ms)

    def get_metadata_many(self, project: str, queues: list[str]) -> list[Any]:
        """Each queue read on its own pool (as ``schedules.records`` groups them)."""
        return [
            self.stores.for_queue(project, queue).get_metadata_many(project, [queue])[0]
            for queue in queues
        ]

    def set_metadata(self, project: str, queue: str, metadata: Any) -> None:
        self.stores.place(project, queue).set_metadata(project, queue, metadata)

    def put_metadata_many(self, project: str, metadata: dict[str, Any], now_ms: int) -> None:
        """Each queue written on its own pool (as ``schedules.records`` groups them)."""
        for queue, one in metadata.items():
            self.stores.place(project, queue).put_metadata_many(project, {queue: one}, now_ms)

    def delete_queue(self, project: str, queue: str) -> None:
        self.stores.for_queue(project, queue).delete_queue(project, queue)
        self.stores.forget(project, queue)

    def create_claim(
        self, project: str, queue: str, times: ClaimTimes, limit: int, now_ms: int
    ) -> Any:
        """As the service claims: the queue's store claims, and what it reports over the
        limit moves to the dead-letter queue's store (:meth:`move_dead_letters`)."""
        outcome = self.stores.for_queue(project, queue).claim(project, queue, times, limit, now_ms)
        if outcome.over_limit is not None:
            self.move_dead_letters(project, queue, outcome.over_limit, now_ms)
        return outcome.claim

    def move_dead_letters(self, project: str, queue: str, over: OverLimit, now_ms: int) -> None:
        """As the service moves them: a dead-letter queue placed nowhere is placed on the
        queue's pool; one on another pool receives copies (``storage.dead_letters``)."""
        self.stores.colocate(project, queue, over.queue)
        source = self.stores.for_queue(project, queue)
        target = self.stores.for_queue(project, over.queue)
        dead_letters.move(source, project, queue, over, target, now_ms)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name in SPANNING:
            return getattr(self.stores.default, name)  # type: ignore[no-any-return]
        resolve = self.stores.place if name in PLACING else self.stores.for_queue
        method = getattr(Driver, name, None)
        if not callable(method):
            raise AttributeError(name)

        @functools.wraps(method)
        def routed(project: str, queue: str, *args: Any, **kwargs: Any) -> Any:
            return getattr(resolve(project, queue), name)(project, queue, *args, **kwargs)

        return routed


def pooled_driver(request: pytest.FixtureRequest) -> Iterator[PooledDriver]:
    """A PooledDriver on two pools of equal weight: "redis" and "mongo"."""
    catalog_driver = open_test_driver(store_url(request, "embedded"))
    namespaces = {name: f"t{uuid.uuid4().hex[:12]}" for name in ("redis", "mongo")}
    uris = {"redis": store_url(request, "redis-server"), "mongo": store_url(request, "mongodb")}
    catalog = catalog_driver.catalog()
    for name in namespaces:
        catalog.put_pool(PoolRecord(name, uris[name], 100, None, {}))

    def open_pool(record: PoolRecord) -> Driver:
        return open_test_driver(record.uri, namespace=namespaces[record.name])

    stores = PooledStores(catalog_driver, catalog, open_pool, refresh_s=0.0)
    yield PooledDriver(stores)
    stores.close()
    for name, uri in uris.items():
        close_test_driver(open_test_driver(uri, namespace=namespaces[name]))
    close_test_driver(catalog_driver)


# The store_uri of the pooled run (a parameter of the contract modules' store_uri).
POOLED = "pooled"
# The contract modules' stores: every store, and pooled.
CONTRACT_STORES = [*STORES, POOLED]


def one_store(store_uri: str) -> str:
    """The URI of a test that opens a second driver on the first's namespace (not pooled:
    its queues have no single store)."""
    if store_uri == POOLED:
        pytest.skip("opens a second driver on one store's namespace")
    return store_uri
