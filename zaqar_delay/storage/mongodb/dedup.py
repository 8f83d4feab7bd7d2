"""Idempotent posting on MongoDB: the dedup ids a queue remembers, one document each.

``dedup``: {p: project, q: queue, i: dedup id, m: id of the message first posted with it,
e: ms until which it is remembered (that message's expiry), ex: e as a date (TTL index)}.
The unique index on (p, q, i) decides races: of concurrent posts with one id, exactly one
insert succeeds and the others read its message id.

Ids are remembered before the messages are inserted, so a consumer can never see a message
twice; if the insert then fails, :meth:`DedupIds.forget` withdraws them again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pymongo
from pymongo.errors import BulkWriteError, DuplicateKeyError

from zaqar_delay import errors
from zaqar_delay.storage.mongodb.schema import as_date

Doc = dict[str, Any]

DUPLICATE_KEY = 11000
# Rounds one id may take when concurrent posts and the TTL monitor race over a lapsed record.
REMEMBER_ATTEMPTS = 3


class DedupIds:
    """The dedup ids of every queue, in one collection."""

    def __init__(self, collection: pymongo.collection.Collection[Doc]) -> None:
        self._collection = collection

    def remember(
        self,
        project: str,
        queue: str,
        candidates: Sequence[tuple[str, str, int]],
        now_ms: int,
    ) -> dict[str, str]:
        """Remember each (dedup id, message id, expires ms) unless the queue already does.

        Returns {dedup id: remembered message id} for the ids that were already remembered
        and live at ``now_ms``; the others are now remembered with the given message id.
        Dedup ids must be distinct.
        """
        if not candidates:
            return {}
        documents = [
            {"p": project, "q": queue, "i": i, "m": m, "e": e, "ex": as_date(e)}
            for i, m, e in candidates
        ]
        try:
            self._collection.insert_many(documents, ordered=False)
            return {}
        except BulkWriteError as exc:
            write_errors = exc.details.get("writeErrors", [])
            if any(error.get("code") != DUPLICATE_KEY for error in write_errors):
                raise
            clashing = [documents[error["index"]] for error in write_errors]
        return {
            doc["i"]: found
            for doc in clashing
            if (found := self._settle(project, queue, doc, now_ms)) is not None
        }

    def _settle(self, project: str, queue: str, document: Doc, now_ms: int) -> str | None:
        """An id whose insert clashed: the live message id remembered for it, or None when
        the record had lapsed and now remembers ``document`` instead."""
        scope = {"p": project, "q": queue, "i": document["i"]}
        for _ in range(REMEMBER_ATTEMPTS):
            existing = self._collection.find_one(scope, {"m": 1, "e": 1})
            if existing is not None and existing["e"] > now_ms:
                return str(existing["m"])
            if existing is not None:
                taken = self._collection.update_one(
                    {"_id": existing["_id"], "e": {"$lte": now_ms}},
                    {"$set": {k: document[k] for k in ("m", "e", "ex")}},
                )
                if taken.modified_count:
                    return None
                continue  # a concurrent post took the lapsed record first: read it again
            try:
                self._collection.insert_one(dict(document))
                return None
            except DuplicateKeyError:
                continue
        raise errors.StorageUnavailable("A dedup id kept changing hands; retry the post.")

    def forget(self, project: str, queue: str, message_ids: Sequence[str]) -> None:
        """Withdraw the ids remembered for these messages (their post failed)."""
        if message_ids:
            self._collection.delete_many({"p": project, "q": queue, "m": {"$in": message_ids}})

    def forget_queue(self, project: str, queue: str) -> None:
        self._collection.delete_many({"p": project, "q": queue})
