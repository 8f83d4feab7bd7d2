"""Swift's dedup records (``storage.dedup_reservation``): the first message posted with an id,
remembered until it expires.

Each id has numbered generations, ``<p>/<q>/<sha1 of the id>/<g>`` in the dedup container,
each created only if absent (``SwiftClient.create_settled``: of concurrent creations exactly
one is kept). The latest generation is the id's record, and its object name the record's
version: a record is created as generation 1, and replaced by creating the generation after
the one replaced. A generation is never deleted while the queue lives (a forgotten one is
overwritten as lapsed), so no number is taken twice.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from zaqar_delay.storage.dedup_reservation import Created, DedupRecord
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.connect import SwiftClient


class SwiftDedupRecords:
    """The dedup records of every queue, in one container."""

    def __init__(self, swift: SwiftClient, container: str) -> None:
        self._swift = swift
        self._container = container

    def _prefix(self, project: str, queue: str, dedup_id: str) -> str:
        return f"{names.queue_prefix(project, queue)}{names.dedup_key(dedup_id)}/"

    def _generation(self, project: str, queue: str, dedup_id: str, number: int) -> str:
        return self._prefix(project, queue, dedup_id) + names.number_part(number)

    def _create(self, name: str, record: DedupRecord) -> DedupRecord | None:
        if not self._swift.create_settled(self._container, name, _body(record), names.CONTENT_TYPE):
            return None
        return dataclasses.replace(record, version=name)

    def _read(self, dedup_id: str, name: str) -> DedupRecord | None:
        """The generation ``name``, which this post read or made before: a 404 is read again
        before it is believed (``known``), since taking it for forgotten replaces it."""
        found = self._swift.get(self._container, name, known=True)
        return None if found is None else _record(dedup_id, name, found[1])

    def create(self, project: str, queue: str, records: Sequence[DedupRecord]) -> list[Created]:
        """In parallel, each id's generations listed: an id without any gets generation 1
        (refused where a concurrent post created it first, or the listing lagged); an id with
        some answers its latest, read past the listing (``latest_numbered``)."""
        return self._swift.each(lambda r: self._create_first(project, queue, r), records)

    def _create_first(self, project: str, queue: str, record: DedupRecord) -> Created:
        prefix = self._prefix(project, queue, record.dedup_id)
        listed = self._swift.listing(self._container, prefix, limit=1, reverse=True)
        if listed:
            return False, self._latest(record.dedup_id, prefix, listed)
        made = self._create(prefix + names.number_part(1), record)
        return made is not None, made

    def latest(self, project: str, queue: str, dedup_id: str) -> DedupRecord | None:
        prefix = self._prefix(project, queue, dedup_id)
        return self._latest(dedup_id, prefix)

    def _latest(
        self, dedup_id: str, prefix: str, listed: list[dict[str, Any]] | None = None
    ) -> DedupRecord | None:
        """The highest generation, found past the listing (``listed``, when read already) if
        it lags (``latest_numbered``); one listed but not read back is lapsed, to be replaced
        by the next."""
        number, body = self._swift.latest_numbered(self._container, prefix, listed)
        if not number:
            return None
        name = prefix + names.number_part(number)
        return _lapsed(dedup_id, name) if body is None else _record(dedup_id, name, body)

    def reread(self, project: str, queue: str, record: DedupRecord) -> DedupRecord | None:
        """The generation as it is now; None when it is gone (its queue was purged)."""
        return self._read(record.dedup_id, record.version)

    def replace(
        self, project: str, queue: str, old: DedupRecord, new: DedupRecord
    ) -> DedupRecord | None:
        """The generation after ``old``'s, created unless a concurrent post created it
        first."""
        number = int(old.version.rsplit("/", 1)[1])
        return self._create(self._generation(project, queue, new.dedup_id, number + 1), new)

    def confirm(self, project: str, queue: str, records: Sequence[DedupRecord]) -> None:
        """Each generation rewritten as stored (the post that made it is its only writer
        until it lapses)."""
        self._swift.each(
            lambda r: self._swift.put(
                self._container, r.version, _body(r, stored=True), names.CONTENT_TYPE
            ),
            records,
        )

    def forget(self, project: str, queue: str, records: Sequence[DedupRecord]) -> None:
        """Each generation overwritten as lapsed, not deleted, so its number is never taken
        again while a later one may be live."""
        self._swift.each(
            lambda r: self._swift.put(self._container, r.version, LAPSED, names.CONTENT_TYPE),
            records,
        )


def _body(record: DedupRecord, *, stored: bool = False) -> bytes:
    """A generation's body: the message, when it expires (so does the generation), when the
    generation was made, and whether the message is known to be stored. Unique to the
    post (the message id is): ``create_settled`` compares bodies."""
    return json.dumps(
        {"m": record.message_id, "e": record.expires_ms, "at": record.at_ms, "s": int(stored)}
    ).encode()


def _record(dedup_id: str, name: str, body: bytes) -> DedupRecord:
    """A generation as read. One of an earlier release, without ``s``, was stored."""
    doc = json.loads(body)
    return DedupRecord(
        dedup_id, str(doc["m"]), int(doc["e"]), int(doc["at"]), bool(doc.get("s", 1)), name
    )


def _lapsed(dedup_id: str, name: str) -> DedupRecord:
    return DedupRecord(dedup_id, "", 0, 0, True, name)


# A generation forgotten: expired, so the next post with its id makes the next one.
LAPSED = _body(DedupRecord("", "", 0, 0), stored=True)
