"""The lifecycle journal: one JSON line per message event, in rotating files.

Each line is an object with ``ts`` (epoch ms of the event, the service's clock), ``event``,
``project``, ``queue`` and ``message_id``, and, by event:

- ``posted``: ``due`` (ms), ``ttl`` (s); or ``repeat: true`` alone, for a message the post
  did not store because the queue remembered its ``dedup_id`` (the message an earlier post
  stored: a client's retry, a fire made again)
- ``claimed``: ``claim_id`` (null for a pop), ``claim_count`` (which delivery this is: 1 for
  the first), ``due`` (ms: when the message was due at that claim)
- ``deleted``: ``claim_id`` when the delete named one; ``repeat: true`` for a message the
  delete named that was gone already (a retried delete, one after a pop: deletes are
  idempotent)
- ``released``: ``claim_id`` (the claim was deleted before its messages were)
- ``rescheduled``: ``due`` (the new due time, ms), ``claim_id`` when it left a claim
- ``edited``: ``changed`` (which of ``body``, ``due``, ``ttl`` the edit replaced), ``due``
  (ms) and ``ttl`` (s) when replaced, ``claim_id`` when the editor named one; never the body
- ``dead_lettered``: ``dead_letter_queue``
- ``scheduled``: ``schedule``, ``slot`` and ``delay`` (ms), and ``due`` (ms); or, in place of
  ``due``, ``repeat: true`` for a fire made again whose message an earlier attempt stored

A message's ``posted``, ``scheduled`` and ``deleted`` lines are written at least once: a
request whose first attempt stored the messages (or deleted them) and lost its answer (the
connection dropped) leaves no line, and its retry, which matches the dedup ids (or finds the
messages gone), writes the ``repeat`` ones; a retry after an answer that did arrive writes a
second line. Readers count such lines once per message id
(:func:`zaqar_delay.pipeline.report.read_journal` does).

Every process writes its own files, ``journal-<host>-<pid>-<start ms>-<n>.jsonl`` in the
journal directory, so gunicorn workers never interleave partial lines; a file is closed and
the next one begun when it exceeds ``max_bytes``. Events of one request are written with one
``write`` call, at once: a killed worker loses at most the request in flight. Old files are
never reopened; with ``[journal] max_total_size`` the process that begins a file deletes the
oldest ones no process writes any more (``journal_retention.py``), else they are the
operator's to remove.

The journal reports what the store already did, so it never fails a request: a write the
disk refuses (full, read-only, failing) loses those events, counted (``on_lost``, the metric
``zaqar_delay_journal_lost_events_total``) and warned of at most once a minute, and the next
write begins a new file, leaving a line cut short at the end of the last one (the report
counts such lines as unreadable). Failing the request instead would answer 500 to a post
stored, a claim made, or a pop whose messages were deleted and then never handed over.

The journal is off unless configured; then :class:`NullJournal` stands in and each hook
costs one empty method call.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from zaqar_delay import journal_retention
from zaqar_delay.models import Fire, Message, MessageEdit, NewMessage

LOG = logging.getLogger(__name__)

Event = dict[str, Any]
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
#: The least time between two warnings of lost journal writes: on a full disk every write
#: fails, and the log would fill with them.
LOST_WARNING_INTERVAL_S = 60.0
#: A line's mark for a message stored by an earlier request (at-least-once lines).
REPEAT = '"repeat":true'

_encode = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode
_encode_str = json.encoder.encode_basestring_ascii


class NullJournal:
    """The journal when it is off: every hook does nothing."""

    enabled = False

    def __init__(self) -> None:
        #: Told how many events a write that failed lost (the service's metrics).
        self.on_lost: Callable[[int], None] = lambda events: None

    def posted(
        self,
        project: str,
        queue: str,
        ids: Sequence[str],
        messages: Sequence[NewMessage],
        positions: Iterable[int],
        now_ms: int,
        repeats: Iterable[int],
    ) -> None:
        """Journal the messages at ``positions`` (those the post stored), and those at
        ``repeats`` (those whose dedup id matched a message stored before) as repeats."""

    def claimed(
        self,
        project: str,
        queue: str,
        claim_id: str | None,
        messages: Iterable[Message],
        now_ms: int,
    ) -> None:
        """Journal deliveries: a claim's messages, or popped ones when ``claim_id`` is None
        (their claim count includes this delivery either way)."""

    def deleted(
        self,
        project: str,
        queue: str,
        ids: Iterable[str],
        claim_id: str | None,
        now_ms: int,
        repeats: Iterable[str],
    ) -> None:
        """Journal the messages ``ids`` a delete removed, and those it named that were gone
        already (``repeats``) as repeats."""

    def released(
        self, project: str, queue: str, claim_id: str, ids: Iterable[str], now_ms: int
    ) -> None:
        """Journal messages a released claim gave back."""

    def rescheduled(self, project: str, queue: str, edit: MessageEdit, now_ms: int) -> None:
        """Journal a new due time."""

    def edited(self, project: str, queue: str, edit: MessageEdit, now_ms: int) -> None:
        """Journal an edit of a message (what it replaced, never the body)."""

    def dead_lettered(
        self, project: str, queue: str, ids: Iterable[str], target: str, now_ms: int
    ) -> None:
        """Journal messages moved to the dead-letter queue ``target``."""

    def pushed(
        self,
        project: str,
        queue: str,
        message_id: str,
        subscription_id: str,
        attempt: int,
        outcome: str,
        due_ms: int,
        error: str,
        now_ms: int,
    ) -> None:
        """Journal one push attempt (``attempt`` 1 is the first; ``outcome`` as in metrics)."""

    def scheduled(
        self, project: str, queue: str, schedule: str, fires: Sequence[Fire], now_ms: int
    ) -> None:
        """Journal the messages a schedule's fire posted to ``queue``: each one's slot, its
        delay after the slot and its due time (the slot plus the delay, or when it was posted
        for a time already past); a fire ``repeated`` (stored by an earlier attempt) as a
        repeat, without the due time, which only the earlier attempt knew."""


class Journal(NullJournal):
    """Writes events to rotating JSON-lines files in ``directory`` (created if missing)."""

    enabled = True

    def __init__(
        self, directory: str, max_bytes: int = DEFAULT_MAX_BYTES, max_total: int = 0
    ) -> None:
        super().__init__()
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.max_bytes = max_bytes
        self.max_total = max_total  # 0: every file is kept
        self._lock = threading.Lock()
        self._fd = -1
        self._pid = -1
        self._size = 0
        self._sequence = 0
        self._started_ms = 0
        self._lost_since_warning = 0
        self._warned_at = float("-inf")

    # -- writing -------------------------------------------------------------------------------

    def write(self, events: Iterable[Event]) -> None:
        """Append the events as lines, with one write; nothing when there are none."""
        self._write_text("".join(_encode(event) + "\n" for event in events))

    def _write_text(self, text: str) -> None:
        data = text.encode("ascii")
        if not data:
            return
        with self._lock:
            written = 0
            try:
                if self._fd < 0 or self._pid != os.getpid() or self._size >= self.max_bytes:
                    self._open_next()
                written = os.write(self._fd, data)
                while written < len(data):  # a disk that fills writes part, then refuses
                    written += os.write(self._fd, data[written:])
            except OSError as exc:
                self._lost(data.count(b"\n") - data.count(b"\n", 0, written), exc)
                return
            self._size += len(data)

    def _lost(self, events: int, exc: OSError) -> None:
        """A write failed: count the events it did not write whole, warn now and then, and
        begin a new file next (what it left of a line stays at the end of this one)."""
        if self._fd >= 0 and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = -1
        self.on_lost(events)
        self._lost_since_warning += events
        now = time.monotonic()
        if now - self._warned_at >= LOST_WARNING_INTERVAL_S:
            LOG.warning(
                "the lifecycle journal in %s lost %d events it could not write (%s); "
                "requests are answered as usual",
                self.directory,
                self._lost_since_warning,
                exc,
            )
            self._warned_at, self._lost_since_warning = now, 0

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0 and self._pid == os.getpid():
                os.close(self._fd)
            self._fd = -1

    def _open_next(self) -> None:
        """Begin the next file; a forked child (a gunicorn worker) begins its own series."""
        if self._pid != os.getpid():
            self._fd, self._pid, self._sequence = -1, os.getpid(), 0
            self._started_ms = _epoch_ms()
        elif self._fd >= 0:
            os.close(self._fd)
            self._fd = -1  # if the next cannot be opened, a write tries again
        self._sequence += 1
        name = journal_retention.file_name(
            socket.gethostname(), self._pid, self._started_ms, self._sequence
        )
        path = os.path.join(self.directory, name)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size
        if self.max_total:
            journal_retention.prune(self.directory, self.max_total, socket.gethostname())

    # -- events --------------------------------------------------------------------------------
    # Lines are formatted directly (the same JSON json.dumps would give, key order included):
    # a third of the cost of encoding a dict per event. Every string is JSON-encoded: ids and
    # claim ids may come from a request's path or query.

    def posted(
        self,
        project: str,
        queue: str,
        ids: Sequence[str],
        messages: Sequence[NewMessage],
        positions: Iterable[int],
        now_ms: int,
        repeats: Iterable[int],
    ) -> None:
        head = _head(now_ms, "posted", project, queue)
        stored = "".join(
            f'{head}{_str(ids[i])},"due":{now_ms + messages[i].delay_ms},'
            f'"ttl":{messages[i].ttl_s}}}\n'
            for i in positions
        )
        self._write_text(stored + "".join(f"{head}{_str(ids[i])},{REPEAT}}}\n" for i in repeats))

    def claimed(
        self,
        project: str,
        queue: str,
        claim_id: str | None,
        messages: Iterable[Message],
        now_ms: int,
    ) -> None:
        head = _head(now_ms, "claimed", project, queue)
        claim = _str(claim_id)
        self._write_text(
            "".join(
                f'{head}{_str(m.id)},"claim_id":{claim},"claim_count":{m.claim_count},'
                f'"due":{m.due_ms}}}\n'
                for m in messages
            )
        )

    def deleted(
        self,
        project: str,
        queue: str,
        ids: Iterable[str],
        claim_id: str | None,
        now_ms: int,
        repeats: Iterable[str],
    ) -> None:
        head = _head(now_ms, "deleted", project, queue)
        claim = _str(claim_id)
        self._write_text(
            "".join(f'{head}{_str(i)},"claim_id":{claim}}}\n' for i in ids)
            + "".join(f'{head}{_str(i)},"claim_id":{claim},{REPEAT}}}\n' for i in repeats)
        )

    def released(
        self, project: str, queue: str, claim_id: str, ids: Iterable[str], now_ms: int
    ) -> None:
        head = _head(now_ms, "released", project, queue)
        claim = _str(claim_id)
        self._write_text("".join(f'{head}{_str(i)},"claim_id":{claim}}}\n' for i in ids))

    def rescheduled(self, project: str, queue: str, edit: MessageEdit, now_ms: int) -> None:
        head = _head(now_ms, "rescheduled", project, queue)
        message, claim = _str(edit.message_id), _str(edit.claim_id)
        line = f'{head}{message},"claim_id":{claim},"due":{edit.due_ms}}}\n'
        self._write_text(line)

    def edited(self, project: str, queue: str, edit: MessageEdit, now_ms: int) -> None:
        head = _head(now_ms, "edited", project, queue)
        changed = [
            name
            for name, value in (("body", edit.body_json), ("due", edit.due_ms), ("ttl", edit.ttl_s))
            if value is not None
        ]
        fields = _encode({"changed": changed, "due": edit.due_ms, "ttl": edit.ttl_s})
        message, claim = _str(edit.message_id), _str(edit.claim_id)
        line = f'{head}{message},"claim_id":{claim},{fields[1:]}\n'
        self._write_text(line)

    def dead_lettered(
        self, project: str, queue: str, ids: Iterable[str], target: str, now_ms: int
    ) -> None:
        head = _head(now_ms, "dead_lettered", project, queue)
        target_json = _str(target)
        self._write_text(
            "".join(f'{head}{_str(i)},"dead_letter_queue":{target_json}}}\n' for i in ids)
        )

    def pushed(
        self,
        project: str,
        queue: str,
        message_id: str,
        subscription_id: str,
        attempt: int,
        outcome: str,
        due_ms: int,
        error: str,
        now_ms: int,
    ) -> None:
        head = _head(now_ms, "pushed", project, queue)
        self._write_text(
            f'{head}{_str(message_id)},"subscription_id":{_str(subscription_id)},'
            f'"attempt":{attempt},"outcome":"{outcome}","due":{due_ms},'
            f'"error":{_str(error or None)}}}\n'
        )

    def scheduled(
        self, project: str, queue: str, schedule: str, fires: Sequence[Fire], now_ms: int
    ) -> None:
        self._write_text(_scheduled_lines(project, queue, schedule, fires, now_ms))


def _scheduled_lines(
    project: str, queue: str, schedule: str, fires: Sequence[Fire], now_ms: int
) -> str:
    head = _head(now_ms, "scheduled", project, queue)
    name = _str(schedule)
    return "".join(
        f'{head}{_str(f.message_id)},"schedule":{name},"slot":{f.slot_ms},'
        + (REPEAT if f.repeated else f'"due":{f.due_ms}')
        + f',"delay":{f.delay_ms}}}\n'
        for f in fires
    )


def _str(value: str | None) -> str:
    return "null" if value is None else _encode_str(value)


def _head(now_ms: int, event: str, project: str, queue: str) -> str:
    """Every line's beginning, up to the message id's value."""
    return (
        f'{{"ts":{now_ms},"event":"{event}","project":{_encode_str(project)},'
        f'"queue":{_encode_str(queue)},"message_id":'
    )


def _epoch_ms() -> int:
    return time.time_ns() // 1_000_000


def open_journal(
    directory: str, max_bytes: int = DEFAULT_MAX_BYTES, max_total: int = 0
) -> NullJournal:
    """The journal writing to ``directory``, or the null journal when it is empty."""
    return Journal(directory, max_bytes, max_total) if directory else NullJournal()
