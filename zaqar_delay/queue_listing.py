"""Pages and counts of a project's queues, or of its topics, over its stores.

The stores keep a project's queues and topics under one name order, topics after every queue
(``topics.py``), and count them together: a page of queues ends where the topics begin, a page
of topics starts at the mark, and topics are counted from their own range.

Zaqar's listing filters (``name``, a part of the name, and any other query parameter an
equality on the stored metadata) are applied to the names as read, a page at a time: a
filtered page reads at most ``FILTER_SCAN_BUDGET`` names, and its next link resumes after the
last name read, so a client that follows the links sees every match.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from zaqar_delay import reserved_metadata, topics, validation
from zaqar_delay.conf import Limits
from zaqar_delay.models import QueueInfo
from zaqar_delay.stores import Stores

# Names read per store call when topics are counted or a filtered page is read.
COUNT_PAGE = 1000
SCAN_PAGE = 200
# Names a filtered page reads at most.
FILTER_SCAN_BUDGET = 2000


@dataclasses.dataclass(frozen=True, slots=True)
class ListFilter:
    """``name``: a part the name holds; ``metadata``: values the stored metadata holds under
    those keys (a query value that reads as an integer is compared as one, as in Zaqar)."""

    name: str | None = None
    metadata: Mapping[str, object] = dataclasses.field(default_factory=dict)

    @classmethod
    def of_query(cls, name: str | None, others: Mapping[str, str]) -> ListFilter:
        """The filter of a listing's ``name`` and its other query parameters."""
        return cls(name, {key: _as_zaqar_reads(value) for key, value in others.items()})

    def __bool__(self) -> bool:
        return bool(self.name) or bool(self.metadata)

    def matches(self, queue: QueueInfo) -> bool:
        if self.name and self.name not in topics.public_name(queue.name):
            return False
        stored = queue.metadata or {}
        return all(key in stored and stored[key] == want for key, want in self.metadata.items())


@dataclasses.dataclass(frozen=True, slots=True)
class Page:
    """A page of queues or topics (stored names) and the stored name the next page starts
    after (None: no next link)."""

    queues: list[QueueInfo]
    resume_after: str | None


class QueueListing:
    """The ``GET /v2/queues`` and ``GET /v2/topics`` reads."""

    def __init__(self, stores: Stores, limits: Limits) -> None:
        self.stores = stores
        self.limits = limits

    def page(
        self,
        project: str,
        marker: str | None,
        limit: int,
        detailed: bool,
        of_topics: bool = False,
        filters: ListFilter | None = None,
    ) -> Page:
        """Up to ``limit`` of the project's queues (``of_topics``: topics) after ``marker`` (a
        name as the API shows it) that ``filters`` match, in name order; with ``detailed``,
        their metadata as GET shows it. Names are stored names: ``views`` shows a topic's
        without its mark."""
        validation.queue_limit(limit, self.limits)
        start = topics.stored(marker or "") if of_topics else marker
        if filters:
            found, resume_after = self._filtered(project, start, limit, of_topics, filters)
        else:
            listed = self.stores.list_queues(project, start, limit, detailed)
            found = [q for q in listed if _is_of_kind(q.name, of_topics)]
            resume_after = found[-1].name if found else None
        if not detailed:
            found = [QueueInfo(q.name, None) for q in found]
        else:
            found = [
                QueueInfo(
                    q.name,
                    reserved_metadata.with_reserved_defaults(q.metadata or {}, self.limits, q.name),
                )
                for q in found
            ]
        return Page(found, resume_after)

    def _filtered(
        self, project: str, start: str | None, limit: int, of_topics: bool, filters: ListFilter
    ) -> tuple[list[QueueInfo], str | None]:
        """The matches among at most ``FILTER_SCAN_BUDGET`` names after ``start``, and where
        the next page starts: after the last match once the names of the kind ran out, else
        after the last name read."""
        found: list[QueueInfo] = []
        last_read: str | None = None
        read = 0
        while read < FILTER_SCAN_BUDGET:
            batch = self.stores.list_queues(project, start, SCAN_PAGE, bool(filters.metadata))
            for queue in batch:
                if not _is_of_kind(queue.name, of_topics):
                    return found, found[-1].name if found else None
                read, last_read = read + 1, queue.name
                if filters.matches(queue):
                    found.append(queue)
                    if len(found) == limit:
                        return found, queue.name
            if len(batch) < SCAN_PAGE:
                return found, found[-1].name if found else None
            start = last_read
        return found, last_read

    def count(self, project: str, of_topics: bool = False) -> int:
        """How many queues (``of_topics``: topics) the project has."""
        marked = count_marked(self.stores, project)
        if of_topics:
            return marked.topics
        return self.stores.count_queues(project) - marked.topics - marked.internal


@dataclasses.dataclass(frozen=True, slots=True)
class Marked:
    """How many of a project's stored names are topics and how many the server's own."""

    topics: int
    internal: int


def count_marked(stores: Stores, project: str) -> Marked:
    """The project's topics and internal names, read from their range of the name order
    (every name from the topic mark on)."""
    counted = {True: 0, False: 0}
    marker: str | None = topics.stored("")
    while marker is not None:
        names = stores.list_queues(project, marker, COUNT_PAGE, False)
        for queue in names:
            counted[topics.is_internal(queue.name)] += 1
        marker = names[-1].name if len(names) == COUNT_PAGE else None
    return Marked(topics=counted[False], internal=counted[True])


def _is_of_kind(queue: str, of_topics: bool) -> bool:
    """Whether ``queue`` is a topic's name (``of_topics``) or a queue's; never the server's."""
    if topics.is_internal(queue):
        return False
    return topics.is_topic(queue) == of_topics


def _as_zaqar_reads(value: str) -> object:
    try:
        return int(value)
    except ValueError:
        return value
