"""Pools and flavors as the admin API manages them: Zaqar's v2 bodies, rules and codes.

A pool's flavor is kept on the pool (as in Zaqar's current API): a flavor's ``pool_list`` is the
pools naming it, and putting a flavor sets the flavor of the pools it lists. Capabilities are
computed from the pools' store types, never taken from the request.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Callable
from typing import Any

from zaqar_delay import errors
from zaqar_delay.pooling.bodies import check_name, pool_fields, pool_list_of
from zaqar_delay.storage.catalog import CatalogStore, FlavorRecord, PoolRecord
from zaqar_delay.storage.resolve import redact

# Zaqar's storage capabilities, in its order.
CAPABILITIES = ("FIFO", "CLAIMS", "DURABILITY", "AOD", "HIGH_THROUGHPUT")
DURABLE_SCHEMES = frozenset({"mongodb", "mongodb+srv", "swift"})
# Stores that serve far fewer requests per second than Redis or MongoDB (each write is an
# object written to disk, each claim waits for its create-only writes to settle).
SLOW_SCHEMES = frozenset({"swift"})
# The name placements on the default store carry ([pooling:catalog] enable_virtual_pool).
VIRTUAL_POOL = "default"


def capabilities_of(uri: str) -> list[str]:
    """What a store of this URI offers, as Zaqar names it: MongoDB journals every write to a
    majority and Swift to a quorum of replicas (DURABILITY); Redis's durability depends on its
    persistence settings. Swift is not HIGH_THROUGHPUT."""
    scheme = urllib.parse.urlsplit(uri).scheme
    return [
        c
        for c in CAPABILITIES
        if (c != "DURABILITY" or scheme in DURABLE_SCHEMES)
        and (c != "HIGH_THROUGHPUT" or scheme not in SLOW_SCHEMES)
    ]


def check_capabilities(document: Any) -> None:
    """A flavor body's ``capabilities``, when given, is an object or a list (Zaqar's schema);
    its content is ignored: a flavor's capabilities are its pools'."""
    if not isinstance(document, dict) or "capabilities" not in document:
        return
    capabilities = document["capabilities"]
    # Zaqar's own clients send an empty list; anything else but an object is refused.
    if capabilities != [] and not isinstance(capabilities, dict):
        raise errors.InvalidBody("capabilities must be an object.")


class Registry:
    """The admin API's view of the catalog: validated changes to pools and flavors.

    ``reachable(record)`` says whether a pool's store answers (a pool that does not is
    refused, as in Zaqar); ``holds_queues(record)`` whether it stores any queue.
    """

    def __init__(
        self,
        store: CatalogStore,
        reachable: Callable[[PoolRecord], bool],
        holds_queues: Callable[[PoolRecord], bool],
        settle: Callable[[], None],
        changed: Callable[[], None],
        check_uri: Callable[[str], None] | None = None,
        store_of: Callable[[str], str] = str,
        retired: Callable[[PoolRecord], None] = lambda _: None,
    ) -> None:
        """``settle()`` waits until every process has seen the catalog change just made
        (two refresh periods); ``changed()`` tells this process's placements at once;
        ``check_uri(uri)`` raises InvalidBody for a URI the deployment refuses;
        ``store_of(uri)`` names the store a (checked) URI reaches, whatever its spelling;
        ``retired(record)`` is told of a pool's store no pool uses any more, once every
        process has seen that (it stops the store if this service runs it)."""
        self.store = store
        self._retired = retired
        self._check_uri = check_uri
        self._store_of = store_of
        self._reachable = reachable
        self._holds_queues = holds_queues
        self._settle = settle
        self._changed = changed

    # -- placements ----------------------------------------------------------------------------

    def placements(self, project: str, marker: str | None, limit: int) -> list[tuple[str, str]]:
        """``(queue, pool)`` of the project's queues in name order after ``marker``."""
        return self.store.list_queues(project, marker, limit)

    def queues_per_pool(self) -> dict[str, int]:
        """How many queues each registered pool (and the virtual pool) holds."""
        names = [p.name for p in self.store.list_pools(None, None)]
        return {name: self.store.queues_on_pool(name) for name in [*names, VIRTUAL_POOL]}

    # -- pools ---------------------------------------------------------------------------------

    def get_pool(self, name: str) -> PoolRecord:
        pool = self.store.get_pool(name)
        if pool is None:
            raise errors.NotFound(f"Pool {name} does not exist")
        return pool

    def list_pools(self, marker: str | None, limit: int) -> list[PoolRecord]:
        return self.store.list_pools(marker, limit)

    def put_pool(self, name: str, document: Any) -> None:
        """Create or replace a pool: 400 when unreachable or its store's capabilities differ
        from its flavor's other pools, 409 when another pool has its URI."""
        if name == VIRTUAL_POOL:
            raise errors.InvalidRequest(f"The pool name {VIRTUAL_POOL!r} is reserved.")
        current = self.store.get_pool(name)
        if current is None:
            check_name("Pool", name)
        fields = pool_fields(document, creating=True)
        record = PoolRecord(
            name, fields["uri"], fields["weight"], fields.get("flavor"), fields.get("options", {})
        )
        self._check_fits(record, current)
        self._replace(record, current)

    def patch_pool(self, name: str, document: Any) -> PoolRecord:
        current = self.get_pool(name)
        fields = pool_fields(document, creating=False)
        record = dataclasses.replace(current, **fields)
        self._check_fits(record, current)
        self._replace(record, current)
        return record

    def _replace(self, record: PoolRecord, current: PoolRecord | None) -> None:
        """Store ``record``; a store it moved away from (holding no queue) is retired once
        every process has seen the move."""
        self.store.put_pool(record)
        self._changed()
        if current is not None and self._store_of(current.uri) != self._store_of(record.uri):
            self._settle()
            self._retired(current)

    def _check_fits(self, record: PoolRecord, current: PoolRecord | None) -> None:
        """Refuse ``record`` (replacing ``current``, if any) when its URI is refused, names a
        store another pool has, would move the queues of ``current`` away from their store,
        or does not fit its flavor; or when its store does not answer."""
        if self._check_uri is not None:
            self._check_uri(record.uri)
        shown = redact(record.uri)
        store = self._store_of(record.uri)
        moved = current is not None and store != self._store_of(current.uri)
        if moved and self.store.queues_on_pool(record.name):
            raise errors.Conflict(
                f"Queues live on pool {record.name}: its URI cannot change under them. Set "
                "its weight to 0, delete or empty its queues, then change it."
            )
        for other in self.store.list_pools(None, None):
            if (
                other.name != record.name
                and self._store_of(other.uri) == store
                and other.options == record.options
            ):
                raise errors.Conflict(f"Pool {other.name} already has the URI {shown}")
        if record.flavor is not None and self.store.get_flavor(record.flavor) is not None:
            expected = self._flavor_capabilities(record.flavor, leaving=record.name)
            if expected is not None and capabilities_of(record.uri) != expected:
                raise errors.PoolRefused(
                    f"The capabilities of pool {record.name} ({shown}) differ from the "
                    f"other pools of flavor {record.flavor}."
                )
        if not self._reachable(record):
            raise errors.InvalidBody(f"cannot connect to {shown}")

    def delete_pool(self, name: str) -> None:
        """Forget a pool: 403 while a flavor uses it, 409 while a queue lives on it (its
        messages would be orphaned). Waits until every process has stopped using the pool,
        then checks its store once more; a queue a process created there meanwhile puts the
        pool back (409)."""
        pool = self.store.get_pool(name)
        if pool is None:
            return
        if pool.flavor is not None and self.store.get_flavor(pool.flavor) is not None:
            raise errors.Forbidden(
                f"This pool is used by flavors {pool.flavor}; It cannot be deleted.",
                title="Unable to delete",
            )
        if self.store.queues_on_pool(name) or self._holds_queues(pool):
            raise self._in_use(name)
        self.store.delete_pool(name)
        self._changed()
        self._settle()
        if self._holds_queues(pool):
            self.store.put_pool(pool)
            self._changed()
            raise self._in_use(name)
        self._retired(pool)

    @staticmethod
    def _in_use(name: str) -> errors.Conflict:
        return errors.Conflict(
            f"Queues live on pool {name}: delete or empty them first (set its weight to 0 so "
            "it takes no new queues)."
        )

    # -- flavors -------------------------------------------------------------------------------

    def pools_of(self, flavor: str) -> list[PoolRecord]:
        return [p for p in self.store.list_pools(None, None) if p.flavor == flavor]

    def _flavor_capabilities(self, flavor: str, leaving: str) -> list[str] | None:
        return _shared_capabilities([p for p in self.pools_of(flavor) if p.name != leaving])

    def flavor_view(self, flavor: FlavorRecord) -> dict[str, Any]:
        """``{name, pool_list, capabilities}``."""
        pools = self.pools_of(flavor.name)
        return {
            "name": flavor.name,
            "pool_list": [p.name for p in pools],
            "capabilities": _shared_capabilities(pools) or [],
        }

    def get_flavor(self, name: str) -> FlavorRecord:
        flavor = self.store.get_flavor(name)
        if flavor is None:
            raise errors.NotFound(f"Flavor {name} does not exist")
        return flavor

    def list_flavors(self, marker: str | None, limit: int) -> list[FlavorRecord]:
        return self.store.list_flavors(marker, limit)

    def put_flavor(self, name: str, document: Any) -> None:
        """Create or replace a flavor of the pools ``pool_list`` names (400 when one does not
        exist or their capabilities differ)."""
        if self.store.get_flavor(name) is None:
            check_name("Flavor", name)
        check_capabilities(document)
        pool_list = pool_list_of(document, required=True)
        assert pool_list is not None
        pools = self._existing_pools(name, pool_list, "created")
        self.store.put_flavor(FlavorRecord(name, tuple(pool_list)))
        self._assign(name, pools)
        self._changed()

    def patch_flavor(self, name: str, document: Any) -> FlavorRecord:
        check_capabilities(document)
        if not isinstance(document, dict) or not ({"pool_list", "capabilities"} & set(document)):
            raise errors.InvalidBody("One of `pool_list` or `capabilities` needs to be specified")
        flavor = self.get_flavor(name)
        pool_list = pool_list_of(document, required=False)
        if pool_list is None:
            return flavor
        pools = self._existing_pools(name, pool_list, "updated")
        flavor = FlavorRecord(name, tuple(pool_list))
        self.store.put_flavor(flavor)
        self._assign(name, pools)
        self._changed()
        return flavor

    def delete_flavor(self, name: str) -> None:
        """Forget a flavor; its pools stay, without a flavor. Queues that asked for it stay
        where they are."""
        for pool in self.pools_of(name):
            self.store.put_pool(dataclasses.replace(pool, flavor=None))
        self.store.delete_flavor(name)
        self._changed()

    def _existing_pools(self, flavor: str, names: list[str], done: str) -> list[PoolRecord]:
        pools = []
        for pool_name in names:
            pool = self.store.get_pool(pool_name)
            if pool is None:
                raise errors.PoolRefused(
                    f"Flavor {flavor} could not be {done}, error:Pool {pool_name} does not exist",
                    title=f"Unable to {'create' if done == 'created' else 'update'}",
                )
            pools.append(pool)
        if len({tuple(capabilities_of(p.uri)) for p in pools}) > 1:
            raise errors.PoolRefused(
                f"Flavor {flavor} could not be {done}: its pools' capabilities differ."
            )
        return pools

    def _assign(self, flavor: str, pools: list[PoolRecord]) -> None:
        """Make ``pools`` exactly the pools of ``flavor``."""
        chosen = {p.name for p in pools}
        for pool in self.pools_of(flavor):
            if pool.name not in chosen:
                self.store.put_pool(dataclasses.replace(pool, flavor=None))
        for pool in pools:
            if pool.flavor != flavor:
                self.store.put_pool(dataclasses.replace(pool, flavor=flavor))


def _shared_capabilities(pools: list[PoolRecord]) -> list[str] | None:
    """The capabilities of a flavor's pools (all alike: put checks it); None without pools."""
    return capabilities_of(pools[0].uri) if pools else None


def pool_view(pool: PoolRecord, detailed: bool) -> dict[str, Any]:
    """A pool as the API shows it (``options`` only when detailed), its URI's password
    redacted."""
    view: dict[str, Any] = {
        "name": pool.name,
        "uri": redact(pool.uri),
        "weight": pool.weight,
        "flavor": pool.flavor,
    }
    if detailed:
        view["options"] = pool.options
    return view
