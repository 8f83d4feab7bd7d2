"""Idempotent posting, written once for the stores whose shared writes are create-if-absent and
compare-and-set (MongoDB, Swift): reserving a post's dedup ids. Redis does the same inside its
post script, in one round trip.

A queue remembers each dedup id in one record (``DedupRecord``): the message first posted with
it, until that message expires. Of concurrent posts with one id, exactly one creates (or takes
over) the record; the others read its message id.

Ids are reserved before the messages are stored, so a consumer can never see a message twice;
if storing them (or owing the pushes for them) then fails, the post forgets the ids again, and
once it is stored whole it confirms them. A repeat that meets an unconfirmed record waits for
its post to confirm it, for the store's grace (``grace_ms``: the longest a post may take to
store its message; ``FIRST_POST_GRACE_MS`` on MongoDB). Unconfirmed then, that post failed
part-way and could not undo it (the store went away, or the process died): if its message is
stored, the repeat completes it (owes the pushes it may not have owed) and confirms it; if not,
the record is taken over. So a repeat is never answered with the id of a message that was
never stored, nor of one never pushed.

The record's time is the first post's clock, and the repeat's may run ahead of it: the grace is
measured on the repeat's own watch from when it first sees the record, and cut short only by as
much as the record is older than ``dead_after_ms`` (the grace plus ``CLOCK_DISAGREEMENT_MS``,
how far two clocks may disagree): a first post that died long before is taken over at once,
one seen just made is waited for. A record taken over by another repeat meanwhile is a new
first post, waited for anew. One request waits at most ``FIRST_POST_WAIT_MS``; a longer grace
is answered 503 with Retry-After (``FirstPostPending``).

A post of several ids that meets one being stored gives back the ids it took and takes them
again one at a time in id order, waiting where it must: posts wait only in that order, so none
waits on a post that waits on it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeVar

from zaqar_delay import errors
from zaqar_delay.admission import stepped_aside
from zaqar_delay.models import NewMessage
from zaqar_delay.storage.bounds import (
    CLOCK_DISAGREEMENT_MS,
    FIRST_POST_GRACE_MS,
    FIRST_POST_POLL_S,
    FIRST_POST_WAIT_MS,
)
from zaqar_delay.storage.dedup_ids import PostDedupIds

# Rounds one id may take while concurrent posts (and, on MongoDB, its TTL monitor) change its
# record between the reads and the writes.
RESERVE_ATTEMPTS = 10

T = TypeVar("T")
R = TypeVar("R")


@dataclasses.dataclass(frozen=True, slots=True)
class DedupRecord:
    """What a queue remembers of a dedup id: the message first posted with it, until when (that
    message's expiry), when it was remembered, and whether its post is stored whole.
    ``version``: the store's name for this state of the record, which the port's writes take
    (MongoDB: the document's ``_id``; Swift: the generation's object name); "" for a record
    not written yet."""

    dedup_id: str
    message_id: str
    expires_ms: int
    at_ms: int
    stored: bool = False
    version: str = ""


#: Dedup ids read at once when asking whether a queue remembers all of a post's.
REMEMBERED_CHUNK = 16

# What creating a record answered: created, and the record created or, if not, the one found.
Created = tuple[bool, DedupRecord | None]


class DedupRecords(Protocol):
    """Where a store keeps the dedup records of its queues."""

    def create(self, project: str, queue: str, records: Sequence[DedupRecord]) -> list[Created]:
        """Create each record whose id the queue has no record of. For each, ``(True, the
        record as created, with its version)``, or ``(False, the queue's record)`` where it
        has one (or a concurrent post created it first): the record as the store read it on
        the way (as :meth:`latest` answers), or None when it did not read it."""

    def latest(self, project: str, queue: str, dedup_id: str) -> DedupRecord | None:
        """The queue's record of ``dedup_id``; None when it has none. A record the store could
        not read back is answered lapsed (``expires_ms`` 0), to be replaced."""

    def reread(self, project: str, queue: str, record: DedupRecord) -> DedupRecord | None:
        """``record`` as it is now; None when its post forgot it."""

    def replace(
        self, project: str, queue: str, old: DedupRecord, new: DedupRecord
    ) -> DedupRecord | None:
        """Remember ``new`` in place of ``old`` if ``old`` is still the queue's record of the
        id; None when another write came first."""

    def confirm(self, project: str, queue: str, records: Sequence[DedupRecord]) -> None:
        """Mark these records, as created or replaced by this post, stored."""

    def forget(self, project: str, queue: str, records: Sequence[DedupRecord]) -> None:
        """Withdraw these records (their post failed, or gives them back); one another post
        has taken over since stays."""


class Mapper(Protocol):
    """How a store maps a call over several ids: ``function`` over ``items``, results in
    order (Swift's client runs them in parallel)."""

    def __call__(self, function: Callable[[T], R], items: Iterable[T], /) -> list[R]: ...


def _one_by_one(function: Callable[[T], R], items: Iterable[T], /) -> list[R]:
    return [function(item) for item in items]


@dataclasses.dataclass(frozen=True, slots=True)
class Reservation:
    """What reserving a post's dedup ids found: ``duplicate_of`` maps each position of the post
    that repeats a remembered id (or an id an earlier message of the post carries) to the id
    of the earlier message; ``taken`` are the records this post made, to confirm once it is
    stored, or to forget if it fails."""

    duplicate_of: dict[int, str]
    taken: list[DedupRecord]


@dataclasses.dataclass(frozen=True, slots=True)
class _Pending:
    """An id whose first post may still be storing its message (answered without waiting)."""


PENDING = _Pending()


class DedupReservation:
    """Reserves the dedup ids of posts on one store. ``complete(project, queue, record,
    now ms)``: whether the message of an unconfirmed ``record`` is stored, once the pushes its
    post may not have owed are owed (asked when its post's time is up); a store that can
    also makes sure a message it answers not stored never will be (MongoDB fences its id),
    so a post stalled past its grace is refused rather than stored twice. ``each``: how the
    store maps a call over several ids (Swift's in parallel; one after another by default).
    ``grace_ms``: how long a first post may still be storing its message after it reserved
    its ids."""

    def __init__(
        self,
        records: DedupRecords,
        complete: Callable[[str, str, DedupRecord, int], bool],
        each: Mapper = _one_by_one,
        grace_ms: int = FIRST_POST_GRACE_MS,
    ) -> None:
        self._records = records
        self._complete = complete
        self._each = each
        self._grace_ms = grace_ms

    @property
    def dead_after_ms(self) -> int:
        """A record older than this, on the clock of the repeat reading it, is past its post's
        grace on any clock."""
        return self._grace_ms + CLOCK_DISAGREEMENT_MS

    def reserve(
        self,
        project: str,
        queue: str,
        messages: Sequence[NewMessage],
        ids: Sequence[str],
        now_ms: int,
    ) -> Reservation:
        """Reserve the dedup ids of a post of ``messages`` at ``now_ms``, to be stored as
        ``ids``, each remembered for its message's ``dedup_memory_s``: the ids the queue
        remembers (live at ``now_ms``) are answered with their first messages, waiting for
        those still being stored; the others are now remembered, unconfirmed until
        :meth:`confirm`."""
        post = PostDedupIds(messages)
        wanted = [
            DedupRecord(dedup_id, ids[i], now_ms + messages[i].dedup_memory_s * 1000, now_ms)
            for dedup_id, i in post.first.items()
        ]
        answers = self._answers(project, queue, wanted, now_ms)
        earlier = {i: a for i, a in answers.items() if isinstance(a, str)}
        taken = [a for a in answers.values() if isinstance(a, DedupRecord)]
        return Reservation(post.duplicates(earlier, ids), taken)

    def _answers(
        self, project: str, queue: str, wanted: list[DedupRecord], now_ms: int
    ) -> dict[str, str | DedupRecord]:
        """{dedup id: the earlier message's id, or the record this post took}."""
        if not wanted:
            return {}
        created = self._records.create(project, queue, wanted)
        answers: dict[str, str | DedupRecord | _Pending] = {
            r.dedup_id: made
            for r, (taken, made) in zip(wanted, created, strict=True)
            if taken and made is not None
        }
        clashed = [
            (r, found) for r, (taken, found) in zip(wanted, created, strict=True) if not taken
        ]
        wait = len(wanted) == 1
        settled = self._each(
            lambda item: self._settle(project, queue, item[0], now_ms, wait, item[1]), clashed
        )
        answers.update(zip((r.dedup_id for r, _ in clashed), settled, strict=True))
        if not any(isinstance(a, _Pending) for a in answers.values()):
            return {i: a for i, a in answers.items() if not isinstance(a, _Pending)}
        # Another post is storing the first message of one of these ids. Waiting for it while
        # holding ids of this post's own could wait on a post that waits on this one: they are
        # given back, and taken again one at a time in id order.
        self.forget(project, queue, [a for a in answers.values() if isinstance(a, DedupRecord)])
        return self._take_in_order(project, queue, wanted, now_ms)

    def _take_in_order(
        self, project: str, queue: str, wanted: list[DedupRecord], now_ms: int
    ) -> dict[str, str | DedupRecord]:
        """The answers for ``wanted``, taken one at a time in id order, waiting where one is
        being stored. A post refused on the way (it waited a request long, or the store
        failed) gives back the ids it took, so no repeat of them waits for it."""
        ordered: dict[str, str | DedupRecord] = {}
        try:
            for record in sorted(wanted, key=lambda r: r.dedup_id):
                [(taken, made)] = self._records.create(project, queue, [record])
                if taken and made is not None:
                    answer: str | DedupRecord | _Pending = made
                else:
                    answer = self._settle(project, queue, record, now_ms, True, made)
                assert not isinstance(answer, _Pending)  # waited for
                ordered[record.dedup_id] = answer
        except errors.StorageUnavailable:
            with contextlib.suppress(errors.StorageUnavailable):
                self.forget(
                    project, queue, [a for a in ordered.values() if isinstance(a, DedupRecord)]
                )
            raise
        return ordered

    def _settle(
        self,
        project: str,
        queue: str,
        wanted: DedupRecord,
        now_ms: int,
        wait: bool,
        found: DedupRecord | None = None,
    ) -> str | DedupRecord | _Pending:
        """An id the queue has a record of (``found``, when the store read it already): the
        message id it remembers, or the record this post took over (the old one had lapsed,
        or its post failed); without ``wait``, ``PENDING`` while its first post may still be
        storing it."""
        for _ in range(RESERVE_ATTEMPTS):
            latest = found or self._records.latest(project, queue, wanted.dedup_id)
            found = None
            if latest is None:
                [(taken, made)] = self._records.create(project, queue, [wanted])
                if taken and made is not None:
                    return made
                found = made
                continue
            if latest.expires_ms > now_ms:
                stored, latest = self._first_post_stored(project, queue, latest, now_ms, wait)
                if stored is None:
                    return PENDING
                if stored:
                    return latest.message_id
            replaced = self._records.replace(project, queue, latest, wanted)
            if replaced is not None:
                return replaced
        raise errors.StorageUnavailable("A dedup id kept changing hands; retry the post.")

    def _first_post_stored(
        self, project: str, queue: str, record: DedupRecord, now_ms: int, wait: bool
    ) -> tuple[bool | None, DedupRecord]:
        """Whether the post that made the live ``record`` stored its message, waiting while
        that post may still be storing it (without ``wait``: None then); with the record as
        last read. Past that time an unconfirmed record's message, if stored, is completed and
        the record confirmed."""
        deadline = self._grace_end(record, now_ms)
        began = time.monotonic()
        while not record.stored:
            if time.monotonic() >= deadline:
                if not self._complete(project, queue, record, now_ms):
                    return False, record
                self._records.confirm(project, queue, [record])
                return True, record
            if not wait:
                return None, record
            self._check_waited(record, now_ms, began)
            with stepped_aside():  # no work meanwhile; the first post may need the turn
                time.sleep(FIRST_POST_POLL_S)
            found = self._records.reread(project, queue, record)
            if found is None or found.expires_ms <= now_ms:
                return False, found or record  # its post failed, and forgot it
            if found.message_id != record.message_id:
                # Another repeat took it over (MongoDB rewrites the record in place): that
                # post may be storing its message now, and is given its own grace.
                deadline = self._grace_end(found, now_ms)
            record = found
        return True, record

    def _grace_end(self, record: DedupRecord, now_ms: int) -> float:
        """On ``time.monotonic``, when a repeat that sees ``record`` unconfirmed now (its clock
        read ``now_ms`` before) stops waiting for its post: the grace from now, less only what
        the record is older than ``dead_after_ms`` on its clock, so a repeat whose clock runs
        ahead of the first post's never cuts the first post's grace short."""
        left_ms = min(self._grace_ms, max(0, self.dead_after_ms - (now_ms - record.at_ms)))
        return time.monotonic() + left_ms / 1000

    def _check_waited(self, record: DedupRecord, now_ms: int, began: float) -> None:
        """FirstPostPending once this request has waited ``FIRST_POST_WAIT_MS`` (since
        ``began``) for the post of ``record``: to retry when the record is past
        ``dead_after_ms`` on this clock."""
        waited_ms = (time.monotonic() - began) * 1000
        if waited_ms < FIRST_POST_WAIT_MS:
            return
        left_ms = self.dead_after_ms - (now_ms + waited_ms - record.at_ms)
        raise errors.FirstPostPending(
            f"The first post of dedup id {record.dedup_id!r} may still be storing its "
            "message; retry the post later.",
            max(1, math.ceil(left_ms / 1000)),
        )

    def remembers(self, project: str, queue: str, dedup_ids: Sequence[str], now_ms: int) -> bool:
        """``Driver.remembers_dedup_ids``: the ids' records read ``REMEMBERED_CHUNK`` at a
        time (``each``), each live at ``now_ms`` and confirmed stored. Reading stops after the
        first chunk with one that is not, so a post of fresh ids costs one chunk of reads."""
        wanted = list(dict.fromkeys(dedup_ids))
        for start in range(0, len(wanted), REMEMBERED_CHUNK):
            found = self._each(
                lambda dedup_id: self._records.latest(project, queue, dedup_id),
                wanted[start : start + REMEMBERED_CHUNK],
            )
            if not all(r is not None and r.stored and r.expires_ms > now_ms for r in found):
                return False
        return True

    def confirm(self, project: str, queue: str, taken: Sequence[DedupRecord]) -> None:
        """Mark the records a post took as stored, once it is stored whole."""
        if taken:
            self._records.confirm(project, queue, taken)

    def forget(self, project: str, queue: str, taken: Sequence[DedupRecord]) -> None:
        """Withdraw the records a post took (it failed, or gives them back)."""
        if taken:
            self._records.forget(project, queue, taken)
