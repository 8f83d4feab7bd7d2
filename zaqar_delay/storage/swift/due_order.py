"""The claim index read in due order: the index's due entries and the messages claimable by
their names, merged (what a claim tries, a listing by due time, the next claimable time)."""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterator
from typing import Any

from zaqar_delay.storage.bounds import CONTENDED_SPREAD
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.common import SwiftBase, is_named_entry

# Entries the reads in due order list first, when they will likely stop after a few.
FIRST_PAGE = 100


@dataclasses.dataclass(slots=True)
class DueCursor:
    """How far a claim's rounds have listed each source of due messages: the last due entry
    of the index, and the last message name."""

    indexed: str = ""
    named: str = ""
    # Whether messages after ``named`` are still to be listed (the scan budget ran out).
    more_named: bool = False


def due_order_key(entry: dict[str, Any]) -> list[str]:
    """The due time and message id a due entry is named for (see ``SwiftBase._due_entry``)."""
    return str(entry["name"]).rsplit("/", 2)[1:]


def named_marker(due_ms: int, message_id: str) -> str:
    """Where to list messages claimable by their names (whose ids begin with their due
    times) from, to find those after ``(due_ms, message_id)`` in due order."""
    due = names.time_part(due_ms)
    if message_id.startswith(due):
        return message_id
    # The marker's id tells a different time (a message rescheduled): due order puts every
    # message named for ``due`` before it (a greater id) or after it (a smaller one).
    return due + ("~" if message_id > due else "")


class DueOrderOps(SwiftBase):
    """Reads of a queue's claimable messages in due order."""

    # -- the claim index -----------------------------------------------------------------------

    def _index_prefix(self, project: str, queue: str, kind: str) -> str:
        return f"{names.queue_prefix(project, queue)}{kind}/"

    def _due_entries(
        self, project: str, queue: str, now_ms: int, cursor: DueCursor, limit: int
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` entries of unclaimed messages due by ``now_ms`` after ``cursor``,
        in due order, and ``cursor`` moved past them: the index's due entries and the
        messages claimable by their names (as entries named by ``_named_entry``), merged."""
        prefix = self._index_prefix(project, queue, "d")
        indexed = self._swift.submit(
            lambda: self._swift.listing(
                self._container(names.INDEX),
                prefix,
                marker=cursor.indexed,
                end_marker=prefix + names.time_part(now_ms + 1),
                limit=limit,
            )
        )
        named, scanned_to, cursor.more_named = self._named_due(
            project, queue, now_ms, cursor.named, limit
        )
        entries = list(heapq.merge(indexed.result(), named, key=due_order_key))[:limit]
        taken_indexed = [e["name"] for e in entries if not is_named_entry(e["name"])]
        taken_named = [e["listed"] for e in entries if is_named_entry(e["name"])]
        cursor.indexed = taken_indexed[-1] if taken_indexed else cursor.indexed
        # Messages passed over (claimed, indexed) are not listed again; those due but not
        # taken here are.
        if taken_named:
            cursor.named = taken_named[-1]
        elif not named:
            cursor.named = scanned_to
        return entries

    def _named_due(
        self, project: str, queue: str, now_ms: int, marker: str, limit: int
    ) -> tuple[list[dict[str, Any]], str, bool]:
        """Up to ``limit`` messages claimable by their names and due by ``now_ms``, after the
        message name ``marker``, as due entries (``listed``: the message's name); the last
        name listed; and whether the scan budget ran out before the listing did.

        The listing also shows the messages claimed or indexed since their post, which are
        passed over: pages grow while they hold fewer than wanted, up to the scan budget in
        all. Those at the front, posted before the frontier slack (``SwiftTimes``) ago, are
        passed over once per process: a message no longer claimable by its name never is
        again, and every message posted later has a later name, so where the first claimable
        one is, or that time, is remembered (``_named_frontiers``) and listings start there."""
        prefix = names.queue_prefix(project, queue)
        known = self._named_frontiers.get(prefix) or ""
        marker = max(marker, known)
        settled = prefix + names.time_part(now_ms - self._times.frontier_slack_ms)
        # Whether this listing starts at the remembered front, so it may move it on.
        at_front, frontier = marker == known, known
        found: list[dict[str, Any]] = []
        scanned, page_size, exhausted = 0, limit, False
        while len(found) < limit and scanned < self._list_scan_budget:
            page_size = min(page_size, self._list_scan_budget - scanned)
            page = self._swift.listing(
                self._container(names.MESSAGES),
                prefix,
                marker=marker,
                end_marker=prefix + names.time_part(now_ms + 1),
                limit=page_size,
            )
            scanned += len(page)
            for entry in page:
                marker = entry["name"]
                named = self._as_named_entry(project, queue, entry)
                at_front = at_front and named is None and marker < settled
                if at_front:
                    frontier = marker  # it and all before it are no longer claimable so
                if named is not None and int(due_order_key(named)[0]) <= now_ms:
                    found.append(named)
                    if len(found) == limit:
                        break
            if len(page) < page_size:
                exhausted = True
                break
            page_size *= CONTENDED_SPREAD
        if frontier > known:
            self._named_frontiers.learn(prefix, frontier)
        return found, marker, len(found) < limit and not exhausted

    # -- due order -----------------------------------------------------------------------------

    def next_claimable_ms(self, project: str, queue: str, now_ms: int) -> int | None:
        times = []
        for kind in ("d", "c"):
            prefix = self._index_prefix(project, queue, kind)
            for entry in self._swift.walk(
                self._container(names.INDEX),
                prefix,
                marker=f"{prefix}{names.time_part(now_ms)}/~",
                page=FIRST_PAGE,
            ):
                if int(names.fields_of(entry["content_type"]).get("e", 0)) > now_ms:
                    times.append(int(entry["name"].rsplit("/", 2)[1]))
                    break
        prefix = names.queue_prefix(project, queue)
        named = self._named_later(
            project, queue, f"{prefix}{names.time_part(now_ms)}~", "", FIRST_PAGE
        )
        for entry in named:
            if int(names.fields_of(entry["content_type"])["e"]) > now_ms:
                times.append(int(due_order_key(entry)[0]))
                break
        return min(times, default=None)

    def _named_later(
        self, project: str, queue: str, marker: str, end_marker: str, page: int
    ) -> Iterator[dict[str, Any]]:
        """The messages claimable by their names listed after the message name ``marker``
        (and before ``end_marker``, if any), as due entries in due order, listed ``page`` at
        a time."""
        prefix = names.queue_prefix(project, queue)
        for entry in self._swift.walk(
            self._container(names.MESSAGES),
            prefix,
            marker=marker,
            end_marker=end_marker,
            page=page,
        ):
            named = self._as_named_entry(project, queue, entry)
            if named is not None:
                yield named

    def _as_named_entry(
        self, project: str, queue: str, entry: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The messages listing's ``entry`` as a due entry (``_named_entry``, its name in
        ``listed``), if it is a message claimable by its name; None otherwise."""
        prefix = names.queue_prefix(project, queue)
        message_id = entry["name"][len(prefix) :]
        fields = names.fields_of(entry["content_type"])
        if "/" in message_id or not names.claimable_by_name(fields):
            return None
        name = self._named_entry(project, queue, int(fields["d"]), message_id)
        return {**entry, "name": name, "listed": entry["name"]}
