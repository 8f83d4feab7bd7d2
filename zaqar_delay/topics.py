"""Topics, Zaqar's fan-out resources, stored as queues under names no queue can have.

A topic ``mars`` is the queue ``~mars`` of its project, in every store and pool: its messages,
due times, subscriptions, pushes, journal events and metrics are a queue's, so every path a
queue's message takes (delays, encryption, retries, dead letters, the address guard) is the
topic's too. A topic differs only in what its routes serve: no claims and no pre-signed
shares, so each message reaches each subscription by push at its due time and is kept until its
TTL, as in Zaqar.

The mark ``~`` is outside the queue-name alphabet (``validation.QUEUE_NAME_RE``), so no queue
route reaches a topic and no topic route reaches a queue: the API validates a topic's name as a
queue's, then marks it (``api/middleware.py``). It sorts after every character of that
alphabet, so in every store's name order a project's topics follow its queues, and each
listing reads its own range (``queue_listing.py``). Journal events and metric labels carry
the stored name: ``~mars`` is the topic ``mars``.

Names that start with ``~~`` are the server's own (``INTERNAL``): the queues that hold a
recurring schedule (``schedules/names.py``). No topic name can make one (a topic's name is a
queue name, which holds no ``~``), and they sort after every topic, so they are a third range:
no listing shows them and no quota counts them as queues.
"""

from __future__ import annotations

MARK = "~"
INTERNAL = "~~"


def stored(topic: str) -> str:
    """The queue name that holds ``topic``."""
    return MARK + topic


def is_topic(queue: str) -> bool:
    """Whether the stored name ``queue`` holds a topic."""
    return queue.startswith(MARK) and not queue.startswith(INTERNAL)


def is_internal(queue: str) -> bool:
    """Whether the stored name ``queue`` is one of the server's own (a schedule's)."""
    return queue.startswith(INTERNAL)


def public_name(queue: str) -> str:
    """The name the API shows for the stored name ``queue`` (a topic without its mark)."""
    return queue[len(MARK) :] if is_topic(queue) else queue


def kind(queue: str) -> str:
    """``"topic"`` or ``"queue"``: what the stored name ``queue`` holds."""
    return "topic" if is_topic(queue) else "queue"


def collection_path(queue: str) -> str:
    """The collection the resource of ``queue`` belongs to: ``/v2/topics`` or ``/v2/queues``."""
    return f"/v2/{kind(queue)}s"


def href(queue: str) -> str:
    """The path of the queue or topic stored as ``queue``."""
    return f"{collection_path(queue)}/{public_name(queue)}"


def described(queue: str) -> str:
    """``queue x`` or ``topic x``, for messages that name the resource."""
    return f"{kind(queue)} {public_name(queue)}"
