"""The pooling catalog in MongoDB (collections ``catalog_*``, ``schema.py``)."""

from __future__ import annotations

import json
import time
from typing import Any

import pymongo
from pymongo import errors as mongo_errors

from zaqar_delay.storage.catalog import CatalogStore, FlavorRecord, PoolRecord
from zaqar_delay.storage.mongodb import schema
from zaqar_delay.storage.mongodb.errors import translate_errors

Doc = dict[str, Any]


def now_ms() -> int:
    """Wall-clock milliseconds: a removed queue's sticky time is seconds long, and processes
    on other hosts compare against it."""
    return time.time_ns() // 1_000_000


class MongoCatalog(CatalogStore):
    """Pools, flavors and placements in the default store's database."""

    def __init__(self, db: pymongo.database.Database[Doc]) -> None:
        self._pools = db[schema.CATALOG_POOLS]
        self._flavors = db[schema.CATALOG_FLAVORS]
        self._queues = db[schema.CATALOG_QUEUES]
        self._meta = db[schema.CATALOG_META]
        self._removed = db[schema.CATALOG_REMOVED]

    def _move_generation_on(self) -> None:
        self._meta.update_one({"_id": "generation"}, {"$inc": {"n": 1}}, upsert=True)

    @staticmethod
    def _page(marker: str | None, limit: int | None) -> tuple[Doc, int]:
        return ({"_id": {"$gt": marker}} if marker else {}), limit or 0

    # -- pools and flavors ---------------------------------------------------------------------

    @translate_errors
    def put_pool(self, pool: PoolRecord) -> None:
        doc = {**pool.document(), "o": json.dumps(pool.options)}  # any keys, "$" and "." too
        self._pools.replace_one({"_id": pool.name}, doc, upsert=True)
        self._move_generation_on()

    @staticmethod
    def _pool_of(doc: Doc) -> PoolRecord:
        return PoolRecord.from_document(doc["_id"], {**doc, "o": json.loads(doc.get("o") or "{}")})

    @translate_errors
    def get_pool(self, name: str) -> PoolRecord | None:
        doc = self._pools.find_one({"_id": name})
        return None if doc is None else self._pool_of(doc)

    @translate_errors
    def list_pools(self, marker: str | None, limit: int | None) -> list[PoolRecord]:
        query, count = self._page(marker, limit)
        return [self._pool_of(doc) for doc in self._pools.find(query).sort("_id").limit(count)]

    @translate_errors
    def delete_pool(self, name: str) -> None:
        self._pools.delete_one({"_id": name})
        self._queues.delete_many({"pool": name})
        self._move_generation_on()

    @translate_errors
    def put_flavor(self, flavor: FlavorRecord) -> None:
        self._flavors.replace_one({"_id": flavor.name}, flavor.document(), upsert=True)
        self._move_generation_on()

    @translate_errors
    def get_flavor(self, name: str) -> FlavorRecord | None:
        doc = self._flavors.find_one({"_id": name})
        return None if doc is None else FlavorRecord.from_document(name, doc)

    @translate_errors
    def list_flavors(self, marker: str | None, limit: int | None) -> list[FlavorRecord]:
        query, count = self._page(marker, limit)
        found = self._flavors.find(query).sort("_id").limit(count)
        return [FlavorRecord.from_document(doc["_id"], doc) for doc in found]

    @translate_errors
    def delete_flavor(self, name: str) -> None:
        self._flavors.delete_one({"_id": name})
        self._move_generation_on()

    # -- queue placements ----------------------------------------------------------------------

    @translate_errors
    def place_queue(self, project: str, queue: str, pool: str) -> str:
        # The TTL monitor deletes late: the sticky time is read from the document.
        removed = self._removed.find_one({"_id": f"{project}/{queue}", "e": {"$gt": now_ms()}})
        if removed is not None and self._pools.find_one({"_id": removed["pool"]}, {"_id": 1}):
            pool = str(removed["pool"])
        try:
            self._queues.insert_one({"p": project, "q": queue, "pool": pool})
        except mongo_errors.DuplicateKeyError:
            placed = self.lookup_queue(project, queue)
            if placed is not None:
                return placed
            return self.place_queue(project, queue, pool)  # removed meanwhile: place again
        return pool

    @translate_errors
    def lookup_queue(self, project: str, queue: str) -> str | None:
        doc = self._queues.find_one({"p": project, "q": queue}, {"pool": 1})
        return None if doc is None else str(doc["pool"])

    @translate_errors
    def remove_queue(self, project: str, queue: str, sticky_ms: int = 0) -> None:
        placed = self._queues.find_one_and_delete({"p": project, "q": queue}, {"pool": 1})
        if placed is None:
            return
        if sticky_ms > 0:
            until = now_ms() + sticky_ms
            self._removed.replace_one(
                {"_id": f"{project}/{queue}"},
                {"pool": placed["pool"], "e": until, "ex": schema.as_date(until)},
                upsert=True,
            )
        self._move_generation_on()

    @translate_errors
    def list_queues(self, project: str, marker: str | None, limit: int) -> list[tuple[str, str]]:
        query: Doc = {"p": project}
        if marker:
            query["q"] = {"$gt": marker}
        found = self._queues.find(query, {"q": 1, "pool": 1}).sort("q").limit(limit)
        return [(doc["q"], doc["pool"]) for doc in found]

    @translate_errors
    def count_queues(self, project: str) -> int:
        return int(self._queues.count_documents({"p": project}))

    @translate_errors
    def queues_on_pool(self, pool: str) -> int:
        return int(self._queues.count_documents({"pool": pool}))

    @translate_errors
    def generation(self) -> int:
        doc = self._meta.find_one({"_id": "generation"})
        return 0 if doc is None else int(doc["n"])
