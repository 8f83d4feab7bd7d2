"""What one project may hold: queues, and subscriptions per queue and per project
(``[transport] max_queues_per_project``, ``max_subscriptions_per_queue``,
``max_subscriptions_per_project``; 0 is no limit).

The limits are checked against the counts when something new is about to be created, not
reserved in the store: creations that race each other may pass a limit by a few. They bound
what a tenant can make the service hold and fan out to, not an exact count.
"""

from __future__ import annotations

import contextlib

from zaqar_delay import errors, topics
from zaqar_delay.conf import Limits
from zaqar_delay.queue_listing import COUNT_PAGE, count_marked
from zaqar_delay.stores import Stores


class Quotas:
    """Refuses (QuotaExceeded, 403) a new queue or subscription past its project's limits."""

    def __init__(self, stores: Stores, limits: Limits) -> None:
        self.stores = stores
        self.limits = limits

    def check_new_queue(self, project: str, queue: str) -> None:
        """Nothing when ``queue`` exists or the project may have one more queue."""
        most = self.limits.max_queues_per_project
        if not most:
            return
        if self.stores.for_queue(project, queue).get_metadata(project, queue) is not None:
            return
        counted = self.stores.count_queues(project)
        if counted >= most:
            # A schedule's own queues are bounded by the schedule limits, not this one.
            counted -= count_marked(self.stores, project).internal
        if counted >= most:
            raise errors.QuotaExceeded(
                f"Project {project} has {most} queues, the most it may have "
                "([transport] max_queues_per_project): delete one first."
            )

    def check_new_subscription(
        self, project: str, queue: str, subscriber: str, now_ms: int
    ) -> None:
        """Nothing when ``subscriber`` is subscribed to ``queue`` already (subscribing again
        answers the existing subscription) or the queue and the project may have one more
        subscription."""
        per_queue = self.limits.max_subscriptions_per_queue
        per_project = self.limits.max_subscriptions_per_project
        if not per_queue and not per_project:
            return
        store = self.stores.for_queue(project, queue)
        if per_queue:
            live = store.list_subscriptions(project, queue, None, per_queue + 1, now_ms)
            if any(s.subscriber == subscriber for s in live):
                return
            if len(live) >= per_queue:
                raise errors.QuotaExceeded(
                    f"Queue {queue} has {per_queue} subscriptions, the most a queue may have "
                    "([transport] max_subscriptions_per_queue): delete one first."
                )
        if not per_project:
            return
        if count_subscriptions(self.stores, project, per_project, now_ms) >= per_project:
            raise errors.QuotaExceeded(
                f"Project {project} has {per_project} subscriptions, the most it may have "
                "([transport] max_subscriptions_per_project): delete one first."
            )


def count_subscriptions(stores: Stores, project: str, most: int, now_ms: int) -> int:
    """The project's live subscriptions over all its queues, counted up to ``most``: a read
    of each of its queues (subscribing is rare, and the queues per project are bounded), in
    pages of queue names. A queue whose store does not answer counts none: with a pool away,
    the project may pass its limit rather than every subscription being refused."""
    counted, marker = 0, None
    while counted < most:
        page = stores.list_queues(project, marker, COUNT_PAGE, False)
        for info in page:
            if topics.is_internal(info.name):
                continue  # a schedule's own subscription, bounded by the schedule limits
            with contextlib.suppress(errors.StorageUnavailable):
                store = stores.for_queue(project, info.name)
                listed = store.list_subscriptions(project, info.name, None, most - counted, now_ms)
                counted += len(listed)
            if counted >= most:
                return counted
        if len(page) < COUNT_PAGE:
            break
        marker = page[-1].name
    return counted
