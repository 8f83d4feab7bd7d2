"""The MongoDB implementation of the storage contract.

Claims are race-free through conditional updates: a message is taken only by an update whose
filter still sees it claimable (``v <= now``), and taking it moves ``v`` to the claim's expiry,
so a concurrent claimer's update no longer matches. Every read filters on expiry; the TTL
index only reclaims space.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import threading
from collections.abc import Sequence
from typing import Any

import pymongo
from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from zaqar_delay import errors, validation
from zaqar_delay.models import (
    Claim,
    ClaimOutcome,
    ListPage,
    Message,
    MessageRef,
    Metadata,
    NewMessage,
    Posted,
    QueueInfo,
    QueueStats,
)
from zaqar_delay.storage import markers
from zaqar_delay.storage.base import Driver, Wakeups
from zaqar_delay.storage.mongodb import schema
from zaqar_delay.storage.mongodb.dedup import DedupIds
from zaqar_delay.storage.mongodb.errors import translate_errors
from zaqar_delay.storage.mongodb.schema import as_date
from zaqar_delay.storage.mongodb.wakeups import MongoWakeups

Doc = dict[str, Any]

# Documents one listing call may examine before it returns a short page (as on Redis).
LIST_SCAN_BUDGET = 2000
# Rounds a claim makes when concurrent claimers take its candidates first.
CLAIM_ATTEMPTS = 5
# Fields a listing scan reads before it fetches the bodies of the messages it keeps.
SCAN_FIELDS = {"k": 1, "e": 1, "u": 1, "ce": 1, "d": 1}


def _claimable(scope: Doc, now_ms: int) -> Doc:
    """Due or whose claim ran out (``v <= now``), and unexpired."""
    return {**scope, "v": {"$lte": now_ms}, "e": {"$gt": now_ms}}


def _redelivery(metadata: Metadata, base: int | str) -> list[Doc]:
    """Update pipeline for messages leaving their claim at ``base`` (ms, or a field path).

    They keep their original due time (and place in line) unless the queue has a
    ``_retry_backoff`` policy: then they are due at base + min(max, initial * factor ^
    (claim_count - 1)) seconds, exactly as the Redis driver computes it.
    """
    policy = validation.retry_backoff(metadata)
    due: Any = "$d"
    if policy is not None:
        initial, factor, maximum = policy
        exponent = {"$max": [{"$subtract": ["$cc", 1]}, 0]}
        seconds = {"$min": [maximum, {"$multiply": [initial, {"$pow": [factor, exponent]}]}]}
        due = {"$toLong": {"$add": [base, {"$multiply": [1000, seconds]}]}}
    return [{"$set": {"d": due}}, {"$set": {"v": "$d", "cid": None, "ce": 0}}]


def _message(doc: Doc, now_ms: int) -> Message:
    live = doc["cid"] is not None and doc["ce"] > now_ms
    return Message(
        id=doc["_id"],
        body=json.loads(doc["b"]),
        ttl_s=int(doc["t"]),
        created_ms=int(doc["cr"]),
        expires_ms=int(doc["e"]),
        due_ms=int(doc["d"]),
        claim_id=doc["cid"] if live else None,
        claim_count=int(doc["cc"]),
        client_id=doc["u"],
    )


class MongoDriver(Driver):
    """Stores queues in one MongoDB database (``client[database]``)."""

    def __init__(
        self,
        client: pymongo.MongoClient[Doc],
        database: str,
        unreliable: bool = False,
        list_scan_budget: int = LIST_SCAN_BUDGET,
    ) -> None:
        self._client = client
        self._unreliable = unreliable
        self._list_scan_budget = list_scan_budget
        db = client.get_database(database)
        self._db = db
        self._queues = db[schema.QUEUES]
        self._messages = db[schema.MESSAGES]
        self._claims = db[schema.CLAIMS]
        self._dedup = DedupIds(db[schema.DEDUP])
        self._closed = threading.Event()
        self._wakeups = MongoWakeups(db, self._closed)

    # -- lifecycle -----------------------------------------------------------------------------

    def ping(self) -> bool:
        try:
            self._client.admin.command("ping")
            return True
        except pymongo.errors.PyMongoError:
            return False

    def close(self) -> None:
        self._closed.set()  # wake-up listeners stop with the driver
        self._client.close()

    def wakeups(self) -> Wakeups:
        return self._wakeups

    @translate_errors
    def prepare(self) -> list[str]:
        schema.create_indexes(self._db)
        if self._replicated():
            return []
        if not self._unreliable:
            raise errors.StorageConfigError(
                "MongoDB is a standalone server (no replica set or mongos): acknowledged "
                "messages would not be replicated; set [storage] unreliable = true to accept it"
            )
        return ["MongoDB is a standalone server: writes are journaled but not replicated"]

    def _replicated(self) -> bool:
        hello = self._client.admin.command("hello")
        return bool(hello.get("setName")) or hello.get("msg") == "isdbgrid"

    # -- queues --------------------------------------------------------------------------------

    def _queue_filter(self, project: str, queue: str) -> Doc:
        return {"p": project, "q": queue}

    @translate_errors
    def create_queue(self, project: str, queue: str, metadata: Metadata, now_ms: int) -> bool:
        document = {"p": project, "q": queue, "m": json.dumps(metadata), "cr": now_ms, "seq": 0}
        try:
            self._queues.insert_one(document)
        except DuplicateKeyError:
            return False
        return True

    @translate_errors
    def get_metadata(self, project: str, queue: str) -> Metadata | None:
        found = self._queues.find_one(self._queue_filter(project, queue), {"m": 1})
        return None if found is None else dict(json.loads(found["m"]))

    @translate_errors
    def set_metadata(self, project: str, queue: str, metadata: Metadata) -> None:
        result = self._queues.update_one(
            self._queue_filter(project, queue), {"$set": {"m": json.dumps(metadata)}}
        )
        if result.matched_count == 0:
            raise errors.QueueDoesNotExist(queue, project)

    @translate_errors
    def delete_queue(self, project: str, queue: str) -> None:
        scope = self._queue_filter(project, queue)
        # Contents first: a failure part-way leaves a queue to delete again, not orphans.
        self._messages.delete_many(scope)
        self._claims.delete_many(scope)
        self._dedup.forget_queue(project, queue)
        self._queues.delete_one(scope)

    @translate_errors
    def list_queues(
        self, project: str, marker: str | None, limit: int, detailed: bool
    ) -> list[QueueInfo]:
        query: Doc = {"p": project}
        if marker:
            query["q"] = {"$gt": marker}
        cursor = self._queues.find(query, {"q": 1, "m": 1}).sort("q", 1).limit(limit)
        return [QueueInfo(d["q"], dict(json.loads(d["m"])) if detailed else None) for d in cursor]

    @translate_errors
    def count_queues(self, project: str) -> int:
        return int(self._queues.count_documents({"p": project}))

    @translate_errors
    def stats(self, project: str, queue: str, now_ms: int) -> QueueStats:
        scope = self._queue_filter(project, queue)
        alive = {**scope, "e": {"$gt": now_ms}}
        total = self._messages.count_documents(alive)
        claimed = self._messages.count_documents({**scope, "ce": {"$gt": now_ms}})
        not_claimable = self._messages.count_documents({**alive, "v": {"$gt": now_ms}})

        def end(direction: int) -> MessageRef | None:
            doc = self._messages.find_one(alive, {"cr": 1}, sort=[("k", direction)])
            return None if doc is None else MessageRef(doc["_id"], int(doc["cr"]))

        earliest = self._messages.find_one(
            {**alive, "v": {"$gt": now_ms}, "cid": None}, {"v": 1}, sort=[("v", 1), ("k", 1)]
        )
        return QueueStats(
            total=total,
            claimed=claimed,
            delayed=not_claimable - claimed,
            next_due_ms=None if earliest is None else int(earliest["v"]),
            # MongoDB's TTL monitor deletes expired messages without telling anyone.
            expired=0,
            oldest=end(1),
            newest=end(-1),
        )

    @translate_errors
    def purge(self, project: str, queue: str) -> None:
        scope = self._queue_filter(project, queue)
        self._messages.delete_many(scope)
        self._claims.delete_many(scope)
        self._dedup.forget_queue(project, queue)

    # -- messages ------------------------------------------------------------------------------

    def _reserve_sequence(self, project: str, queue: str, count: int, now_ms: int) -> int:
        """Take ``count`` sequence numbers (creating the queue if needed); returns the first."""
        for _ in range(3):
            try:
                updated = self._queues.find_one_and_update(
                    self._queue_filter(project, queue),
                    {"$inc": {"seq": count}, "$setOnInsert": {"m": "{}", "cr": now_ms}},
                    upsert=True,
                    return_document=ReturnDocument.AFTER,
                )
            except DuplicateKeyError:
                continue  # a concurrent post created the queue first; the retry updates it
            # MongoDB returns the upserted document; secantusdb has answered None when a
            # concurrent upsert created it first. Either way the retry updates it.
            if updated is not None:
                return int(updated["seq"]) - count + 1
        raise errors.StorageUnavailable("The queue could not be created.")

    def _documents(
        self,
        project: str,
        queue: str,
        messages: Sequence[NewMessage],
        client_id: str,
        now_ms: int,
    ) -> list[Doc]:
        first = self._reserve_sequence(project, queue, len(messages), now_ms)
        documents = []
        for i, message in enumerate(messages):
            due = now_ms + message.delay_ms
            expires = now_ms + message.ttl_s * 1000
            documents.append(
                {
                    "_id": secrets.token_hex(16),
                    "p": project,
                    "q": queue,
                    "k": first + i,
                    "b": message.body_json,
                    "u": client_id,
                    "t": message.ttl_s,
                    "cr": now_ms,
                    "e": expires,
                    "ex": as_date(expires),
                    "d": due,
                    "v": due,
                    "cid": None,
                    "ce": 0,
                    "cc": 0,
                }
            )
        return documents

    @translate_errors
    def post_messages(
        self,
        project: str,
        queue: str,
        messages: Sequence[NewMessage],
        client_id: str,
        now_ms: int,
    ) -> Posted:
        documents = self._documents(project, queue, messages, client_id, now_ms)
        duplicate_of = self._remember_dedup_ids(project, queue, messages, documents, now_ms)
        fresh = [d for i, d in enumerate(documents) if i not in duplicate_of]

        # One ordered insert command; if it fails part-way, the documents it did write are
        # deleted again (and their dedup ids forgotten) before the error is reported, so a
        # refused post leaves nothing. (Multi-document transactions would also cover a crash
        # of this process between the two, at the price of a replica set and much slower
        # posts.)
        if fresh:
            fresh_ids = [d["_id"] for d in fresh]
            try:
                self._messages.insert_many(fresh)
            except pymongo.errors.PyMongoError:
                self._messages.delete_many({"_id": {"$in": fresh_ids}})
                self._dedup.forget(project, queue, fresh_ids)
                raise
            self._wakeups.wake(project, queue)
        ids = [duplicate_of.get(i) or str(d["_id"]) for i, d in enumerate(documents)]
        return Posted(ids, tuple(sorted(duplicate_of)))

    def _remember_dedup_ids(
        self,
        project: str,
        queue: str,
        messages: Sequence[NewMessage],
        documents: Sequence[Doc],
        now_ms: int,
    ) -> dict[int, str]:
        """{position: id of the earlier message} for messages whose dedup id the queue
        remembers (or an earlier message of this post carries); remembers the others'."""
        first_position: dict[str, int] = {}
        repeated: dict[int, int] = {}
        for i, message in enumerate(messages):
            if message.dedup_id:
                repeated[i] = first_position.setdefault(message.dedup_id, i)
        if not first_position:
            return {}
        candidates = [
            (dedup_id, documents[i]["_id"], documents[i]["e"])
            for dedup_id, i in first_position.items()
        ]
        remembered = self._dedup.remember(project, queue, candidates, now_ms)
        duplicate_of: dict[int, str] = {}
        for i, first in repeated.items():
            earlier = remembered.get(messages[first].dedup_id)
            if earlier is not None:
                duplicate_of[i] = earlier
            elif first != i:
                duplicate_of[i] = documents[first]["_id"]
        return duplicate_of

    @translate_errors
    def list_messages(
        self,
        project: str,
        queue: str,
        *,
        marker: str | None,
        limit: int,
        client_id: str,
        echo: bool,
        include_claimed: bool,
        include_delayed: bool,
        now_ms: int,
    ) -> ListPage:
        after = markers.posting(marker)
        query: Doc = self._queue_filter(project, queue)
        if isinstance(after, str):
            found = self._messages.find_one({**query, "_id": after}, {"k": 1})
            after = None if found is None else int(found["k"])
        if after is not None:
            query["k"] = {"$gt": after}
        scanned = list(
            self._messages.find(query, SCAN_FIELDS).sort("k", 1).limit(self._list_scan_budget)
        )
        kept, cursor = [], None
        for doc in scanned:
            cursor = doc["k"]
            if (
                doc["e"] > now_ms
                and (echo or doc["u"] != client_id)
                and (include_claimed or doc["ce"] <= now_ms)
                and (include_delayed or doc["d"] <= now_ms)
            ):
                kept.append(doc["_id"])
                if len(kept) == limit:
                    break
        more = len(kept) < limit and len(scanned) == self._list_scan_budget
        found = {d["_id"]: d for d in self._messages.find({**query, "_id": {"$in": kept}})}
        messages = tuple(_message(found[i], now_ms) for i in kept if i in found)
        next_marker = str(cursor) if cursor is not None and (messages or more) else None
        return ListPage(messages, next_marker)

    @translate_errors
    def list_messages_by_due(
        self,
        project: str,
        queue: str,
        *,
        marker: str | None,
        limit: int,
        client_id: str,
        echo: bool,
        include_delayed: bool,
        now_ms: int,
    ) -> ListPage:
        after = markers.due(marker)
        if after is not None and not after[1].isdigit():
            raise errors.InvalidParameter('The "marker" parameter is invalid.')
        scope = self._queue_filter(project, queue)
        self._return_lapsed_claims(scope, self.get_metadata(project, queue) or {}, now_ms)
        query: Doc = {**scope, "ce": 0, "e": {"$gt": now_ms}}
        if not include_delayed:
            query["v"] = {"$lte": now_ms}
        if not echo:
            query["u"] = {"$ne": client_id}
        if after is not None:
            due_ms, seq = after[0], int(after[1])
            query["$or"] = [{"v": {"$gt": due_ms}}, {"v": due_ms, "k": {"$gt": seq}}]
        docs = list(
            self._messages.find(query).sort([("v", 1), ("k", 1)]).limit(limit).hint("claimable")
        )
        # Unclaimed documents have v == d, so the marker is (due, sequence).
        next_marker = markers.make_due(docs[-1]["v"], docs[-1]["k"]) if docs else None
        return ListPage(tuple(_message(d, now_ms) for d in docs), next_marker)

    @translate_errors
    def get_messages(
        self, project: str, queue: str, ids: Sequence[str], now_ms: int
    ) -> list[Message]:
        if not ids:
            return []
        query = {
            **self._queue_filter(project, queue),
            "_id": {"$in": list(ids)},
            "e": {"$gt": now_ms},
        }
        found = {d["_id"]: d for d in self._messages.find(query)}
        return [_message(found[i], now_ms) for i in ids if i in found]

    def _live_claim(self, project: str, queue: str, claim_id: str, now_ms: int) -> Doc | None:
        return self._claims.find_one(
            {**self._queue_filter(project, queue), "_id": claim_id, "e": {"$gt": now_ms}}
        )

    @translate_errors
    def delete_message(
        self, project: str, queue: str, message_id: str, claim_id: str | None, now_ms: int
    ) -> None:
        scope = {**self._queue_filter(project, queue), "_id": message_id}
        for _ in range(CLAIM_ATTEMPTS):
            doc = self._messages.find_one(scope, {"e": 1, "cid": 1, "ce": 1})
            if doc is None:
                return
            if doc["e"] <= now_ms:
                self._messages.delete_one(scope)
                return
            self._check_claim(project, queue, doc, claim_id, now_ms)
            # Delete only if nothing changed since the read; otherwise decide again.
            guard = {**scope, "cid": doc["cid"], "ce": doc["ce"]}
            if self._messages.delete_one(guard).deleted_count:
                return
        raise errors.StorageUnavailable("The message could not be deleted.")

    def _check_claim(
        self, project: str, queue: str, doc: Doc, claim_id: str | None, now_ms: int
    ) -> None:
        """Refuse a change to a claimed message unless ``claim_id`` names its live claim."""
        live = doc["cid"] is not None and doc["ce"] > now_ms
        if claim_id is None:
            if live:
                raise errors.MessageIsClaimed()
            return
        if not live:
            raise errors.ClaimNotValid(
                "A claim was specified, but the message is not currently claimed."
            )
        if doc["cid"] != claim_id:
            if self._live_claim(project, queue, claim_id, now_ms):
                raise errors.MessageIsClaimed()
            raise errors.ClaimNotValid("The specified claim does not exist or has expired.")

    @translate_errors
    def reschedule_message(
        self,
        project: str,
        queue: str,
        message_id: str,
        claim_id: str | None,
        due_ms: int,
        now_ms: int,
    ) -> None:
        scope = {**self._queue_filter(project, queue), "_id": message_id}
        for _ in range(CLAIM_ATTEMPTS):
            doc = self._messages.find_one({**scope, "e": {"$gt": now_ms}}, {"cid": 1, "ce": 1})
            if doc is None:
                raise errors.MessageDoesNotExist(message_id, queue, project)
            self._check_claim(project, queue, doc, claim_id, now_ms)
            moved = self._messages.update_one(
                {**scope, "cid": doc["cid"], "ce": doc["ce"]},
                {"$set": {"d": due_ms, "v": due_ms, "cid": None, "ce": 0}},
            )
            if moved.matched_count:
                self._wakeups.wake(project, queue)
                return
        raise errors.StorageUnavailable("The message could not be rescheduled.")

    @translate_errors
    def delete_messages(
        self,
        project: str,
        queue: str,
        ids: Sequence[str],
        claim_ids: Sequence[str] | None,
        now_ms: int,
    ) -> None:
        if not ids:
            return
        query = {**self._queue_filter(project, queue), "_id": {"$in": list(ids)}}
        if claim_ids is not None:
            held_elsewhere = {
                **query,
                "ce": {"$gt": now_ms},
                "cid": {"$nin": list(claim_ids)},
            }
            if self._messages.find_one(held_elsewhere, {"_id": 1}) is not None:
                raise errors.MessageIsClaimed()
        self._messages.delete_many(query)

    @translate_errors
    def pop_messages(self, project: str, queue: str, limit: int, now_ms: int) -> list[Message]:
        holder = secrets.token_hex(16)
        metadata = self.get_metadata(project, queue) or {}
        taken = self._take(project, queue, holder, now_ms + 60_000, limit, metadata, now_ms)
        if taken:
            self._messages.delete_many({**self._queue_filter(project, queue), "cid": holder})
        return [_message(d, now_ms) for d in taken]

    # -- claims --------------------------------------------------------------------------------

    def _return_lapsed_claims(self, scope: Doc, metadata: Metadata, now_ms: int) -> None:
        """Messages whose claim ran out become claimable again (see ``_redelivery``)."""
        self._messages.update_many(
            {**scope, "ce": {"$gt": 0, "$lte": now_ms}}, _redelivery(metadata, "$ce")
        )

    def claim_candidates(self, scope: Doc, now_ms: int, limit: int) -> pymongo.cursor.Cursor[Doc]:
        """Ids of up to ``limit`` claimable messages of ``scope``, oldest due first.

        Served by the ``claimable`` index: equality on the scope, a range on ``v``, and the sort
        in index order, so a claim reads ``limit`` index entries whatever the backlog.
        """
        return (
            self._messages.find(_claimable(scope, now_ms), {"_id": 1})
            .sort([("v", 1), ("k", 1)])
            .limit(limit)
            .hint("claimable")
        )

    def _take(
        self,
        project: str,
        queue: str,
        claim_id: str,
        expires_ms: int,
        limit: int,
        metadata: Metadata,
        now_ms: int,
    ) -> list[Doc]:
        """Put up to ``limit`` claimable messages under ``claim_id``; returns their documents
        (claim count already raised), oldest due first."""
        scope = self._queue_filter(project, queue)
        self._return_lapsed_claims(scope, metadata, now_ms)
        claimable = _claimable(scope, now_ms)
        taken = 0
        for _ in range(CLAIM_ATTEMPTS):
            candidates = [d["_id"] for d in self.claim_candidates(scope, now_ms, limit - taken)]
            if not candidates:
                break
            # The v <= now guard drops candidates a concurrent claimer took meanwhile.
            taken += self._messages.update_many(
                {**claimable, "_id": {"$in": candidates}},
                {"$set": {"cid": claim_id, "ce": expires_ms, "v": expires_ms}, "$inc": {"cc": 1}},
            ).modified_count
            if taken >= limit:
                break
        if not taken:
            return []
        held = self._messages.find({**scope, "cid": claim_id}).sort([("d", 1), ("k", 1)])
        return list(held)

    def _extend_lifetimes(
        self, scope: Doc, claim_id: str, expires_ms: int, ttl_s: int, grace_s: int
    ) -> None:
        extended = expires_ms + grace_s * 1000
        self._messages.update_many(
            {**scope, "cid": claim_id, "e": {"$lt": expires_ms}},
            {"$set": {"e": extended, "ex": as_date(extended), "t": ttl_s + grace_s}},
        )

    @translate_errors
    def claim(
        self,
        project: str,
        queue: str,
        *,
        ttl_s: int,
        grace_s: int,
        limit: int,
        now_ms: int,
    ) -> ClaimOutcome:
        claim_id = secrets.token_hex(16)
        expires_ms = now_ms + ttl_s * 1000
        metadata = self.get_metadata(project, queue) or {}
        taken = self._take(project, queue, claim_id, expires_ms, limit, metadata, now_ms)
        if not taken:
            return ClaimOutcome(None)
        max_claims, target = metadata.get("_max_claim_count"), metadata.get("_dead_letter_queue")
        dead: list[Doc] = []
        if isinstance(max_claims, int) and max_claims >= 1 and isinstance(target, str) and target:
            # The count was raised when taking: more than the maximum means it was already there.
            dead = [d for d in taken if d["cc"] > max_claims]
        moved: tuple[str, ...] = ()
        if dead:
            moved = self._move_to_dead_letter(project, queue, dead, target, metadata, now_ms)  # type: ignore[arg-type]
        outcome = ClaimOutcome(None, moved, target if moved else "")  # type: ignore[arg-type]
        kept = [d for d in taken if d not in dead]
        if not kept:
            return outcome
        scope = self._queue_filter(project, queue)
        self._extend_lifetimes(scope, claim_id, expires_ms, ttl_s, grace_s)
        self._claims.insert_one(
            {
                **scope,
                "_id": claim_id,
                "t": ttl_s,
                "g": grace_s,
                "u": now_ms,
                "e": expires_ms,
                "ex": as_date(expires_ms),
            }
        )
        held = self._messages.find({**scope, "cid": claim_id}).sort([("d", 1), ("k", 1)])
        messages = tuple(_message(d, now_ms) for d in held)
        claim = Claim(claim_id, ttl_s, grace_s, now_ms, expires_ms, messages)
        return dataclasses.replace(outcome, claim=claim)

    def _move_to_dead_letter(
        self,
        project: str,
        queue: str,
        dead: list[Doc],
        target: str,
        metadata: Metadata,
        now_ms: int,
    ) -> tuple[str, ...]:
        """Move each message to the dead-letter queue in place (one atomic update each);
        returns their ids."""
        ttl_override = metadata.get("_dead_letter_queue_messages_ttl")
        first = self._reserve_sequence(project, target, len(dead), now_ms)
        for i, doc in enumerate(dead):
            ttl = ttl_override if isinstance(ttl_override, int) and ttl_override else doc["t"]
            expires = now_ms + int(ttl) * 1000
            self._messages.update_one(
                {"_id": doc["_id"], "p": project, "q": queue, "cid": doc["cid"]},
                {
                    "$set": {
                        "q": target,
                        "k": first + i,
                        "t": ttl,
                        "e": expires,
                        "ex": as_date(expires),
                        "d": now_ms,
                        "v": now_ms,
                        "cid": None,
                        "ce": 0,
                        "cc": 0,
                    }
                },
            )
        self._wakeups.wake(project, target)
        return tuple(str(d["_id"]) for d in dead)

    @translate_errors
    def next_claimable_ms(self, project: str, queue: str, now_ms: int) -> int | None:
        # Unclaimed messages have v = due, claimed ones v = claim expiry: one index lookup.
        scope = self._queue_filter(project, queue)
        found = self._messages.find_one(
            {**scope, "v": {"$gt": now_ms}}, {"v": 1}, sort=[("v", 1), ("k", 1)]
        )
        return None if found is None else int(found["v"])

    @translate_errors
    def get_claim(self, project: str, queue: str, claim_id: str, now_ms: int) -> Claim:
        claim = self._live_claim(project, queue, claim_id, now_ms)
        if claim is None:
            raise errors.ClaimDoesNotExist(claim_id, queue, project)
        held = self._messages.find(
            {**self._queue_filter(project, queue), "cid": claim_id, "ce": {"$gt": now_ms}}
        ).sort([("d", 1), ("k", 1)])
        return Claim(
            claim_id,
            int(claim["t"]),
            int(claim["g"]),
            int(claim["u"]),
            int(claim["e"]),
            tuple(_message(d, now_ms) for d in held),
        )

    @translate_errors
    def renew_claim(
        self, project: str, queue: str, claim_id: str, ttl_s: int, grace_s: int, now_ms: int
    ) -> None:
        scope = self._queue_filter(project, queue)
        expires_ms = now_ms + ttl_s * 1000
        renewed = self._claims.update_one(
            {**scope, "_id": claim_id, "e": {"$gt": now_ms}},
            {
                "$set": {
                    "t": ttl_s,
                    "g": grace_s,
                    "u": now_ms,
                    "e": expires_ms,
                    "ex": as_date(expires_ms),
                }
            },
        )
        if renewed.matched_count == 0:
            raise errors.ClaimDoesNotExist(claim_id, queue, project)
        self._messages.update_many(
            {**scope, "cid": claim_id, "ce": {"$gt": now_ms}},
            {"$set": {"ce": expires_ms, "v": expires_ms}},
        )
        self._extend_lifetimes(scope, claim_id, expires_ms, ttl_s, grace_s)

    @translate_errors
    def release_claim(self, project: str, queue: str, claim_id: str, now_ms: int) -> None:
        scope = self._queue_filter(project, queue)
        if not self._claims.delete_one({**scope, "_id": claim_id}).deleted_count:
            return
        metadata = self.get_metadata(project, queue) or {}
        released = self._messages.update_many(
            {**scope, "cid": claim_id, "ce": {"$gt": now_ms}}, _redelivery(metadata, now_ms)
        )
        if released.modified_count:
            self._wakeups.wake(project, queue)
