"""Swift's dedup records (``storage.dedup_reservation``): the first message posted with an id,
remembered until it expires, then reclaimed by Swift's object expirer.

An id's records are numbered generations, each created only if absent
(``SwiftClient.create_settled``: of concurrent creations exactly one is kept). The latest
generation is the id's record, and its object name the record's version: a record is replaced
by creating the generation after the one replaced, so no number is taken twice while a later
one may be live (a forgotten generation is overwritten as lapsed, not deleted).

Generations form chains, one per epoch of the wall clock (``SwiftTimes.dedup_epoch_ms``):
``<p>/<q>/<sha1 of the id>/e<epoch>-<g>``. A post builds on a chain only if it is of its
clock's epoch or a later one; an id whose latest record is in an older chain gets generation 1
of the current chain. So a chain stops growing within the overlap
(``SwiftTimes.dedup_overlap_ms``: the clocks' disagreement, a post's decision, a listing's lag)
after its epoch ends, and every generation in it carries one ``X-Delete-At``, when every record
in it has expired (``SwiftTimes.dedup_reclaim_s``): Swift reclaims a chain whole, once no post
builds on it.

Within the overlap after an epoch starts, a post whose clock is still in the previous epoch may
build on that epoch's chain (or create its first generation) while one whose clock is in the
new epoch starts the new chain: both would store. So a post that starts a chain then first
blocks the previous one, by creating its next generation as a marker naming the new epoch: of
that creation and a builder's, exactly one is kept. A post that meets a marker follows it to
the chain it names.

A listing shows the newest chain's latest generation, as far as it is listed; the newer chains
it may not show yet (the current epoch's, and within the overlap the previous one's) are read
by their first generation. Generations an earlier release named without an epoch are an id's
oldest chain, which is not reclaimed.

A generation's data is written once. Its post confirms it, or forgets it, by a POST of its
state (``names.DEDUP_STATE``), not by overwriting it: an object server checks a create-only
write against the object as it finds it on disk, and one replacing the object's data at that
moment hides it, so a post creating that generation just then (it read it as absent a moment
before) would store over a record whose message is stored. A first POST adds a file and
replaces none. Without ``reclaim`` the state is written in the body instead, where servers of
the earlier release read it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Sequence
from typing import Any

from zaqar_delay.clock import Clock, SystemClock
from zaqar_delay.storage.dedup_reservation import Created, DedupRecord
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.connect import ConcurrentUpdate, SwiftClient
from zaqar_delay.storage.swift.timing import SwiftTimes

# Markers followed from one chain to the next before a generation is taken as lapsed (a post
# blocks only the chain before its own, so one is the most a reader meets).
MARKERS_FOLLOWED = 3


@dataclasses.dataclass(frozen=True, slots=True)
class _Latest:
    """The latest generation of one of an id's chains: ``epoch`` the chain's (None: an earlier
    release's chain), ``number`` 0 when the chain has none, ``doc`` the generation as read
    (None: listed but not read back, lapsed)."""

    epoch: int | None
    number: int
    doc: dict[str, Any] | None = None
    # When the read that found it was sent (``time.monotonic()``; 0: not read here).
    read_at: float = 0.0

    @property
    def marker(self) -> bool:
        return self.doc is not None and "to" in self.doc


NOTHING = _Latest(None, 0)


class SwiftDedupRecords:
    """The dedup records of every queue, in one container. ``times``: the epochs, their
    overlap and their reclaim time; ``clock``: the wall clock the epochs are read on;
    ``reclaim`` False: an id without a record, or whose latest is an earlier release's, is
    recorded in that release's chain (never reclaimed, and all that release's servers read),
    for a store that servers of that release still use."""

    def __init__(
        self,
        swift: SwiftClient,
        container: str,
        times: SwiftTimes,
        clock: Clock | None = None,
        *,
        reclaim: bool = True,
    ) -> None:
        self._swift = swift
        self._container = container
        self._times = times
        self._clock = clock or SystemClock()
        self._reclaim = reclaim

    def _id_prefix(self, project: str, queue: str, dedup_id: str) -> str:
        return f"{names.queue_prefix(project, queue)}{names.dedup_key(dedup_id)}/"

    def _epoch(self, now_ms: int) -> int:
        return now_ms // self._times.dedup_epoch_ms

    def _in_overlap(self, now_ms: int) -> bool:
        """Whether posts may still build on the previous epoch's chain."""
        return now_ms % self._times.dedup_epoch_ms < self._times.dedup_overlap_ms

    # -- reading -------------------------------------------------------------------------------

    def _chain(
        self, id_prefix: str, epoch: int | None, listed: list[dict[str, Any]] | None = None
    ) -> _Latest:
        """The latest generation of the chain of ``epoch``, read past its listing (``listed``:
        its last entry; ``[]`` reads from generation 1 without listing)."""
        prefix = names.dedup_chain(id_prefix, epoch)
        read_at = time.monotonic()
        number, found = self._swift.latest_numbered(self._container, prefix, listed)
        return _Latest(epoch, number, None if found is None else _document(*found), read_at)

    def _from(self, id_prefix: str, epoch: int | None, number: int) -> _Latest:
        """The latest generation of a chain known to have ``number``."""
        return self._chain(id_prefix, epoch, [{"name": _name(id_prefix, epoch, number)}])

    def _followed(self, id_prefix: str, latest: _Latest) -> _Latest:
        """``latest``, or where the markers it leads to lead: the latest of the chain named.
        Each marker is settled first (``_settled``)."""
        for _ in range(MARKERS_FOLLOWED):
            latest = self._settled(id_prefix, latest)
            if not latest.marker:
                break
            assert latest.doc is not None
            latest = self._chain(id_prefix, int(latest.doc["to"]), [])
        return latest

    def _settled(self, id_prefix: str, latest: _Latest) -> _Latest:
        """``latest``, unless it is a marker: then read again once every creation that could
        still overwrite it is committed (``SwiftClient.settled``, from when the read that found
        it was sent), and the chain's latest from there if a record did. A marker and a
        record created together both succeed, and the later is kept: a post that followed
        the marker before the record landed would start the next chain beside a live record,
        and both posts would store."""
        if not latest.marker:
            return latest
        name = _name(id_prefix, latest.epoch, latest.number)
        # Past settle_ms and the round trip of the read that found it, as a creation waits.
        kept = self._swift.settled(self._container, name, latest.read_at or time.monotonic())
        # A marker is never updated: its body is all of it.
        settled = _Latest(latest.epoch, latest.number, None if kept is None else json.loads(kept))
        if settled.marker:
            return settled
        return self._from(id_prefix, latest.epoch, latest.number)

    def _find(self, id_prefix: str, now_ms: int, listed: list[dict[str, Any]]) -> _Latest:
        """The id's latest generation: of the newest chain ``listed`` (the id's last entry)
        shows, or of a newer one it may not show yet."""
        shown = names.dedup_place(id_prefix, listed[-1]["name"])[0] if listed else None
        current = self._epoch(now_ms)
        newer = [current, current - 1] if self._in_overlap(now_ms) else [current]
        for epoch in newer:
            if listed and shown is not None and epoch <= shown:
                break
            found = self._chain(id_prefix, epoch, [])
            if found.number:
                return self._followed(id_prefix, found)
        if not listed:
            return NOTHING
        return self._followed(id_prefix, self._chain(id_prefix, shown, listed))

    def _record(self, dedup_id: str, id_prefix: str, latest: _Latest) -> DedupRecord | None:
        """The record ``latest`` is (a marker read as lapsed); None for no generation."""
        if not latest.number:
            return None
        name = _name(id_prefix, latest.epoch, latest.number)
        if latest.doc is None or latest.marker:
            return DedupRecord(dedup_id, "", 0, 0, True, name)
        doc = latest.doc
        # One of an earlier release, without ``s``, was stored.
        stored = bool(doc.get("s", 1))
        return DedupRecord(dedup_id, str(doc["m"]), int(doc["e"]), int(doc["at"]), stored, name)

    # -- writing -------------------------------------------------------------------------------

    def _reclaimed(self, epoch: int | None) -> dict[str, str]:
        """The ``X-Delete-At`` of the chain of ``epoch``: none for an earlier release's, nor
        once past (Swift refuses a past one; only a lowered ``max_message_ttl`` makes it so)."""
        if epoch is None:
            return {}
        at = self._times.dedup_reclaim_s(epoch)
        return {"X-Delete-At": str(at)} if at * 1000 > self._clock.now_ms() + 1000 else {}

    def _create(self, id_prefix: str, epoch: int | None, number: int, doc: dict[str, Any]) -> bool:
        name = _name(id_prefix, epoch, number)
        return self._swift.create_settled(
            self._container, name, _body(doc), names.CONTENT_TYPE, self._reclaimed(epoch)
        )

    def _take(self, id_prefix: str, latest: _Latest, record: DedupRecord) -> Created:
        """Create ``record`` after ``latest`` (the id's latest generation, not live, or
        ``NOTHING``): as its chain's next generation if that chain is of the current epoch or
        later, else as the current chain's first, once the previous chain is blocked. Else
        ``(False, the record a concurrent post wrote first)``, or ``(False, None)`` when
        markers kept naming chains not started."""
        for _ in range(MARKERS_FOLLOWED):
            place = self._place(id_prefix, latest, record)
            if isinstance(place, _Latest):
                return False, self._record(record.dedup_id, id_prefix, place)
            epoch, number = place
            if self._create(id_prefix, epoch, number, _doc(record)):
                return True, dataclasses.replace(record, version=_name(id_prefix, epoch, number))
            latest = self._followed(id_prefix, self._from(id_prefix, epoch, number))
            if latest.number:
                return False, self._record(record.dedup_id, id_prefix, latest)
            # A marker naming a chain not started yet: the post starts it.
        return False, None

    def _place(
        self, id_prefix: str, latest: _Latest, record: DedupRecord
    ) -> tuple[int | None, int] | _Latest:
        """Where ``record`` goes after ``latest``: (epoch, number); or the generation in the
        way of starting the current chain."""
        if latest.epoch is None and not self._reclaim:
            return None, latest.number + 1
        now_ms = self._clock.now_ms()
        current = self._epoch(now_ms)
        if latest.epoch is not None and latest.epoch >= current:
            return latest.epoch, latest.number + 1
        in_the_way = self._block_previous(id_prefix, latest, current, now_ms, record)
        return (current, 1) if in_the_way is None else in_the_way

    def _block_previous(
        self, id_prefix: str, latest: _Latest, current: int, now_ms: int, record: DedupRecord
    ) -> _Latest | None:
        """Before the chain of ``current`` is started: within the overlap, the previous
        chain blocked by a marker at its next generation. None once it is (or outside the
        overlap); else the generation in the way (a live record, or one just written)."""
        if not self._in_overlap(now_ms):
            return None
        previous = current - 1
        found = latest if latest.epoch == previous else self._chain(id_prefix, previous, [])
        found = self._settled(id_prefix, found)
        if found.marker:
            return None
        if found.doc is not None and int(found.doc["e"]) > now_ms:
            return found
        marker = {"m": "", "e": 0, "at": now_ms, "s": 1, "to": current, "by": record.message_id}
        if self._create(id_prefix, previous, found.number + 1, marker):
            return None
        written = self._settled(id_prefix, self._from(id_prefix, previous, found.number + 1))
        return None if written.marker else written

    # -- the port (storage.dedup_reservation.DedupRecords) ---------------------------------------

    def create(self, project: str, queue: str, records: Sequence[DedupRecord]) -> list[Created]:
        """In parallel, each id's generations listed: an id without any gets the first of the
        current chain (refused where a concurrent post created it first); an id with some
        answers its latest, read past the listing."""
        return self._swift.each(lambda r: self._create_first(project, queue, r), records)

    def _create_first(self, project: str, queue: str, record: DedupRecord) -> Created:
        id_prefix = self._id_prefix(project, queue, record.dedup_id)
        listed = self._swift.listing(self._container, id_prefix, limit=1, reverse=True)
        if not listed:
            return self._take(id_prefix, NOTHING, record)
        found = self._find(id_prefix, self._clock.now_ms(), listed)
        if found.number:
            return False, self._record(record.dedup_id, id_prefix, found)
        # A marker naming a chain not started: the post starts it.
        return self._take(id_prefix, found, record)

    def latest(self, project: str, queue: str, dedup_id: str) -> DedupRecord | None:
        id_prefix = self._id_prefix(project, queue, dedup_id)
        listed = self._swift.listing(self._container, id_prefix, limit=1, reverse=True)
        found = self._find(id_prefix, self._clock.now_ms(), listed)
        return self._record(dedup_id, id_prefix, found)

    def reread(self, project: str, queue: str, record: DedupRecord) -> DedupRecord | None:
        """The generation as it is now; None when it is gone (its queue was purged). A 404 is
        read again before it is believed (``known``), since taking it for forgotten replaces
        it."""
        found = self._swift.get(self._container, record.version, known=True)
        if found is None:
            return None
        id_prefix = self._id_prefix(project, queue, record.dedup_id)
        epoch, number = names.dedup_place(id_prefix, record.version)
        return self._record(record.dedup_id, id_prefix, _Latest(epoch, number, _document(*found)))

    def replace(
        self, project: str, queue: str, old: DedupRecord, new: DedupRecord
    ) -> DedupRecord | None:
        """The generation after ``old``'s (or the current chain's first, ``old``'s chain being
        older), created unless a concurrent post wrote first. ``old``'s chain is read again
        from it first: a generation made after it since is a concurrent post's, and a marker
        (which reads as lapsed: a record it overwrote, created with it, may have been read
        live before it landed) is followed, since the chain it blocks takes no generation
        more."""
        id_prefix = self._id_prefix(project, queue, new.dedup_id)
        epoch, number = names.dedup_place(id_prefix, old.version)
        latest = self._followed(id_prefix, self._from(id_prefix, epoch, number))
        if latest.number and (latest.epoch, latest.number) != (epoch, number):
            return None
        made, record = self._take(id_prefix, latest, new)
        return record if made else None

    def confirm(self, project: str, queue: str, records: Sequence[DedupRecord]) -> None:
        """Each generation marked stored (by its post, or by a repeat that found its message
        stored after its post's grace)."""
        self._swift.each(lambda r: self._update(project, queue, r, STORED), records)

    def forget(self, project: str, queue: str, records: Sequence[DedupRecord]) -> None:
        """Each generation marked lapsed, not deleted, so its number is never taken again
        while a later one may be live."""
        self._swift.each(lambda r: self._update(project, queue, r, LAPSED), records)

    def _update(self, project: str, queue: str, record: DedupRecord, state: str) -> None:
        """Give the generation ``state`` (``STORED`` or ``LAPSED``): a POST of
        ``names.DEDUP_STATE`` (one overtaken by a concurrent update is as if it had come first
        and been replaced; one of a generation gone, purged with its queue, does nothing);
        without ``reclaim``, an overwrite of its document, as the earlier release writes it."""
        id_prefix = self._id_prefix(project, queue, record.dedup_id)
        reclaimed = self._reclaimed(names.dedup_place(id_prefix, record.version)[0])
        if not self._reclaim:
            doc = _doc(record, stored=True) if state == STORED else _doc(LAPSED_RECORD, stored=True)
            self._swift.put(
                self._container, record.version, _body(doc), names.CONTENT_TYPE, reclaimed
            )
            return
        with contextlib.suppress(ConcurrentUpdate):
            self._swift.set_user_metadata(
                self._container, record.version, {names.DEDUP_STATE: state, **reclaimed}
            )


def _name(id_prefix: str, epoch: int | None, number: int) -> str:
    return names.dedup_generation(id_prefix, epoch, number)


def _doc(record: DedupRecord, *, stored: bool = False) -> dict[str, Any]:
    """A generation's document: the message, when it expires (so does the generation), when
    the generation was made, and whether the message is known to be stored. Unique to the
    post (the message id is): ``create_settled`` compares bodies."""
    return {"m": record.message_id, "e": record.expires_ms, "at": record.at_ms, "s": int(stored)}


def _body(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


# The states a generation's post (or a repeat) gives it after its creation.
STORED, LAPSED = "stored", "lapsed"
# A generation forgotten: expired, so the next post with its id makes the next one.
LAPSED_RECORD = DedupRecord("", "", 0, 0)


def _document(headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """A generation's document as read: its body, with the state a POST gave it."""
    state = headers.get(names.DEDUP_STATE.lower())
    if state == LAPSED:
        return _doc(LAPSED_RECORD, stored=True)
    doc: dict[str, Any] = json.loads(body)
    if state == STORED:
        doc["s"] = 1
    return doc
