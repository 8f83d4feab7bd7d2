"""Pages and counts of a project's queues, or of its topics, over its stores.

The stores keep a project's queues and topics under one name order, topics after every queue
(``topics.py``), and count them together: a page of queues ends where the topics begin, a page
of topics starts at the mark, and topics are counted from their own range.
"""

from __future__ import annotations

from zaqar_delay import reserved_metadata, topics, validation
from zaqar_delay.conf import Limits
from zaqar_delay.models import QueueInfo
from zaqar_delay.stores import Stores

# Names read per store call when topics are counted.
COUNT_PAGE = 1000


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
    ) -> list[QueueInfo]:
        """Up to ``limit`` of the project's queues (``of_topics``: topics) after ``marker`` (a
        name as the API shows it), in name order; with ``detailed``, their metadata as GET
        shows it. Names are stored names: ``views`` shows a topic's without its mark."""
        validation.queue_limit(limit, self.limits)
        start = topics.stored(marker or "") if of_topics else marker
        listed = self.stores.list_queues(project, start, limit, detailed)
        queues = [q for q in listed if topics.is_topic(q.name) == of_topics]
        if not detailed:
            return queues
        return [
            QueueInfo(
                q.name,
                reserved_metadata.with_reserved_defaults(q.metadata or {}, self.limits, q.name),
            )
            for q in queues
        ]

    def count(self, project: str, of_topics: bool = False) -> int:
        """How many queues (``of_topics``: topics) the project has."""
        counted_topics = 0
        marker: str | None = topics.stored("")
        while marker is not None:
            names = self.stores.list_queues(project, marker, COUNT_PAGE, False)
            counted_topics += len(names)
            marker = names[-1].name if len(names) == COUNT_PAGE else None
        if of_topics:
            return counted_topics
        return self.stores.count_queues(project) - counted_topics
