"""The pooling catalog in Redis.

Every key carries the hash tag ``{catalog}``: one cluster slot, so a placement is one atomic
script. Keys (``<prefix>:{catalog}:...``):

- ``pools``, ``flavors``: HASH name -> JSON record
- ``q:<project>``: HASH queue -> pool; ``qi:<project>``: ZSET of its queue names (score 0,
  listed lexicographically); ``on:<pool>``: SET of ``<project>/<queue>`` placed on the pool
- ``gen``: the generation (``CatalogStore.generation``)
- ``removed:<project>/<queue>``: STRING, the pool of a queue removed less than its sticky
  time ago (expires then)
"""

from __future__ import annotations

import json
from typing import Any

from zaqar_delay.storage.catalog import CatalogStore, FlavorRecord, PoolRecord
from zaqar_delay.storage.redis.acks import ReplicaAcks, write_acked
from zaqar_delay.storage.redis.errors import translate_class_errors
from zaqar_delay.storage.redis.replies import text

# KEYS: q, qi, on, removed. ARGV: queue, pool, member of on. The pool the queue is on.
PLACE = """
local placed = redis.call('HGET', KEYS[1], ARGV[1])
if placed then return placed end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
redis.call('SADD', KEYS[3], ARGV[3])
redis.call('DEL', KEYS[4])
return ARGV[2]
"""


@translate_class_errors
class RedisCatalog(CatalogStore):
    """Pools, flavors and placements under the default store's key prefix."""

    def __init__(self, client: Any, prefix: str, acks: ReplicaAcks) -> None:
        self._client = client
        self._acks = acks
        self._base = f"{prefix}:{{catalog}}"
        self._place = client.register_script(PLACE)

    def _key(self, *parts: str) -> str:
        return ":".join((self._base, *parts))

    def _write(self, commands: Any) -> list[Any]:
        return write_acked(self._client, self._acks, self._key("gen"), commands)

    @staticmethod
    def _page(names: list[bytes], marker: str | None, limit: int | None) -> list[str]:
        ordered = sorted(n.decode() for n in names)
        after = [n for n in ordered if marker is None or n > marker]
        return after if limit is None else after[:limit]

    # -- pools and flavors ---------------------------------------------------------------------

    def put_pool(self, pool: PoolRecord) -> None:
        document = json.dumps(pool.document())
        self._write(
            lambda c: (c.hset(self._key("pools"), pool.name, document), c.incr(self._key("gen")))
        )

    def get_pool(self, name: str) -> PoolRecord | None:
        raw = self._client.hget(self._key("pools"), name)
        return None if raw is None else PoolRecord.from_document(name, json.loads(raw))

    def list_pools(self, marker: str | None, limit: int | None) -> list[PoolRecord]:
        raws = self._client.hgetall(self._key("pools"))
        return [
            PoolRecord.from_document(name, json.loads(raws[name.encode()]))
            for name in self._page(list(raws), marker, limit)
        ]

    def delete_pool(self, name: str) -> None:
        members = self._client.smembers(self._key("on", name))

        def forget(c: Any) -> None:
            c.hdel(self._key("pools"), name)  # first: nothing is placed on it from now on
            for member in members:
                project, queue = member.decode().rsplit("/", 1)
                c.hdel(self._key("q", project), queue)
                c.zrem(self._key("qi", project), queue)
            c.delete(self._key("on", name))
            c.incr(self._key("gen"))

        self._write(forget)

    def put_flavor(self, flavor: FlavorRecord) -> None:
        document = json.dumps(flavor.document())
        self._write(
            lambda c: (
                c.hset(self._key("flavors"), flavor.name, document),
                c.incr(self._key("gen")),
            )
        )

    def get_flavor(self, name: str) -> FlavorRecord | None:
        raw = self._client.hget(self._key("flavors"), name)
        return None if raw is None else FlavorRecord.from_document(name, json.loads(raw))

    def list_flavors(self, marker: str | None, limit: int | None) -> list[FlavorRecord]:
        raws = self._client.hgetall(self._key("flavors"))
        return [
            FlavorRecord.from_document(name, json.loads(raws[name.encode()]))
            for name in self._page(list(raws), marker, limit)
        ]

    def delete_flavor(self, name: str) -> None:
        self._write(lambda c: (c.hdel(self._key("flavors"), name), c.incr(self._key("gen"))))

    # -- queue placements ----------------------------------------------------------------------

    def place_queue(self, project: str, queue: str, pool: str) -> str:
        removed = self._key("removed", f"{project}/{queue}")
        earlier = self._client.get(removed)
        if earlier is not None and self._client.hexists(self._key("pools"), earlier):
            pool = earlier.decode()
        keys = [self._key("q", project), self._key("qi", project), self._key("on", pool), removed]
        args = [queue, pool, f"{project}/{queue}"]
        if self._acks.required:
            (placed,) = self._write(lambda c: self._place(keys=keys, args=args, client=c))
        else:  # a script object loads itself on NOSCRIPT only when called on a client
            placed = self._place(keys=keys, args=args)
        return text(placed)

    def lookup_queue(self, project: str, queue: str) -> str | None:
        raw = self._client.hget(self._key("q", project), queue)
        return None if raw is None else raw.decode()

    def remove_queue(self, project: str, queue: str, sticky_ms: int = 0) -> None:
        pool = self.lookup_queue(project, queue)
        if pool is None:
            return

        def remove(c: Any) -> None:
            c.hdel(self._key("q", project), queue)
            c.zrem(self._key("qi", project), queue)
            c.srem(self._key("on", pool), f"{project}/{queue}")
            if sticky_ms > 0:
                c.set(self._key("removed", f"{project}/{queue}"), pool, px=sticky_ms)
            c.incr(self._key("gen"))

        self._write(remove)

    def list_queues(self, project: str, marker: str | None, limit: int) -> list[tuple[str, str]]:
        start = f"({marker}" if marker else "-"
        names = self._client.zrangebylex(self._key("qi", project), start, "+", start=0, num=limit)
        if not names:
            return []
        pools = self._client.hmget(self._key("q", project), names)
        return [
            (name.decode(), pool.decode())
            for name, pool in zip(names, pools, strict=True)
            if pool is not None
        ]

    def count_queues(self, project: str) -> int:
        return int(self._client.zcard(self._key("qi", project)))

    def queues_on_pool(self, pool: str) -> int:
        return int(self._client.scard(self._key("on", pool)))

    def generation(self) -> int:
        return int(self._client.get(self._key("gen")) or 0)
