"""The MongoDB implementation of the storage contract.

Claims are race-free through conditional updates: a message is taken only by an update whose
filter still sees it claimable (``v <= now``), and taking it moves ``v`` to the claim's expiry,
so a concurrent claimer's update no longer matches. Every read filters on expiry; the TTL
index only reclaims space.
"""

from __future__ import annotations

import datetime
import threading
from typing import Any

import pymongo

from zaqar_delay import errors
from zaqar_delay.storage.bounds import LIST_SCAN_BUDGET
from zaqar_delay.storage.catalog import CatalogStore
from zaqar_delay.storage.dedup_reservation import DedupReservation
from zaqar_delay.storage.mongodb import schema
from zaqar_delay.storage.mongodb.claims import ClaimOps
from zaqar_delay.storage.mongodb.common import Doc
from zaqar_delay.storage.mongodb.dedup import MongoDedupRecords
from zaqar_delay.storage.mongodb.errors import translate_errors
from zaqar_delay.storage.mongodb.messages import MessageOps
from zaqar_delay.storage.mongodb.pushes import PushOps
from zaqar_delay.storage.mongodb.queues import QueueOps
from zaqar_delay.storage.mongodb.subscriptions import SubscriptionOps
from zaqar_delay.storage.mongodb.wakeups import MongoWakeups
from zaqar_delay.storage.traits import Durability, Wakeups


class MongoDriver(QueueOps, MessageOps, ClaimOps, SubscriptionOps, PushOps):
    """Stores queues in one MongoDB database (``client[database]``)."""

    def __init__(
        self,
        client: pymongo.MongoClient[Doc],
        database: str,
        unreliable: bool = False,
        list_scan_budget: int = LIST_SCAN_BUDGET,
        replica_acks: int = 0,
    ) -> None:
        """``replica_acks``: the secondaries the client's write concern waits for
        (``connect.mongo_client``), checked against the replica set by :meth:`prepare`."""
        self._client = client
        self._unreliable = unreliable
        self._replica_acks = replica_acks
        self._list_scan_budget = list_scan_budget
        db = client.get_database(database)
        self._db = db
        self._queues = db[schema.QUEUES]
        self._messages = db[schema.MESSAGES]
        self._claims = db[schema.CLAIMS]
        self._subscriptions = db[schema.SUBSCRIPTIONS]
        self._pushes = db[schema.PUSHES]
        self._push_limits = db[schema.PUSH_LIMITS]
        self._dedup_records = MongoDedupRecords(db[schema.DEDUP])
        self._dedup = DedupReservation(self._dedup_records, self._complete_post)
        self._closed = threading.Event()
        self._wakeups = MongoWakeups(db, self._closed)

    # -- lifecycle -----------------------------------------------------------------------------

    def unreachable_reason(self) -> str | None:
        try:
            self._client.admin.command("ping")
        except pymongo.errors.PyMongoError as exc:
            # A server selection timeout goes on with the whole topology: its first part
            # says why.
            return " ".join(str(exc).split(", Timeout: ")[0].split()) or type(exc).__name__
        return None

    @translate_errors
    def clock_ms(self) -> int:
        local = self._client.admin.command("hello")["localTime"]  # UTC, naive unless tz_aware
        return int(local.replace(tzinfo=local.tzinfo or datetime.UTC).timestamp() * 1000)

    @translate_errors
    def durability(self) -> Durability:
        """Writes are journaled (``j``) on ``w`` members: majority, or ``replica_acks`` + 1.
        They survive a process crash and a power loss; a machine loss and a failover too
        when ``w`` is at least 2 members."""
        hello = self._client.admin.command("hello")
        members = _data_bearing_members(hello)
        sharded = _is_mongos(hello)
        written_on = self._replica_acks + 1 if self._replica_acks else members // 2 + 1
        survives = ["process crash", "power loss"]
        if sharded or written_on >= 2:
            survives += ["machine loss", "failover"]
        return Durability(
            store="mongodb",
            replica_acks=self._replica_acks,
            survives=tuple(survives),
            facts={
                "replica_set": hello.get("setName"),
                "members": members,
                "mongos": sharded,
                "write_concern": self._client.write_concern.document,
            },
        )

    def close(self) -> None:
        self._closed.set()  # wake-up listeners stop with the driver
        self._client.close()

    def wakeups(self) -> Wakeups:
        return self._wakeups

    def catalog(self) -> CatalogStore:
        from zaqar_delay.storage.mongodb.catalog import MongoCatalog

        return MongoCatalog(self._db)

    @translate_errors
    def holds_queues(self) -> bool:
        return self._queues.find_one({}, {"_id": 1}) is not None

    @translate_errors
    def pending_changes(self) -> list[str]:
        missing = schema.missing_indexes(self._db)
        return [
            f"index {collection}.{name} to build at the next start" for collection, name in missing
        ]

    @translate_errors
    def prepare(self) -> list[str]:
        """Create the indexes; refuse a standalone server (unless ``unreliable``) and a
        ``replica_acks`` the replica set cannot give, or gives below a majority."""
        warnings = self.deployment_warnings()
        schema.create_indexes(self._db)
        return warnings

    @translate_errors
    def deployment_warnings(self) -> list[str]:
        hello = self._client.admin.command("hello")
        if self._replica_acks:
            self._check_replica_acks(hello)
        if hello.get("setName") or _is_mongos(hello):
            return []
        if not self._unreliable:
            raise errors.StorageConfigError(
                "MongoDB is a standalone server (no replica set or mongos): acknowledged "
                "messages would not be replicated; set [storage] unreliable = true to accept it"
            )
        return ["MongoDB is a standalone server: writes are journaled but not replicated"]

    def _check_replica_acks(self, hello: dict[str, Any]) -> None:
        if _is_mongos(hello):
            return  # the shards' replica sets answer the write concern
        members = _data_bearing_members(hello)
        wanted = self._replica_acks + 1
        if not hello.get("setName") or wanted > members:
            raise errors.StorageConfigError(
                f"[storage] replica_acks = {self._replica_acks} needs a MongoDB replica set of "
                f"at least {wanted} data-bearing members; this one has {members}"
            )
        if wanted < members // 2 + 1:
            raise errors.StorageConfigError(
                f"[storage] replica_acks = {self._replica_acks} asks fewer members than a "
                f"majority of the replica set's {members}: such writes can be rolled back on "
                "failover; use 0 (majority) or a larger count"
            )


def _is_mongos(hello: dict[str, Any]) -> bool:
    return hello.get("msg") == "isdbgrid"


def _data_bearing_members(hello: dict[str, Any]) -> int:
    """The replica set's members that hold data, as ``hello`` lists them (none standalone)."""
    return len(hello.get("hosts", [])) + len(hello.get("passives", []))
