"""Where a schedule lives: two queues of the server's own (``topics.INTERNAL``) per schedule.

``~~<target>~<name>`` holds the schedule: its definition in the queue's metadata (written
only when a client writes the schedule), and its *tick*, a message due just before the next
slot, which the push machinery hands to ``push/schedules.py`` (the queue's one subscription,
``zaqar-schedule:``) at its due time. ``~~<target>~<name>~s`` holds, in its metadata, what the
fires did (how many, the last one): written only by the fire of a tick, so a client's write
and a fire never overwrite each other. ``<target>`` is the stored name of the queue or topic
the schedule posts to (a topic's starts with ``~``). Neither a queue's name nor a schedule's
holds a ``~``, so each name reads back one way.
"""

from __future__ import annotations

from zaqar_delay import topics

STATE_SUFFIX = "~s"
#: The subscriber of a definition queue: its ticks go to ``push/schedules.py``.
SCHEDULE_SUBSCRIBER = "zaqar-schedule:"


def prefix(target: str) -> str:
    """What the names of every schedule of ``target`` start with (they sort together)."""
    return f"{topics.INTERNAL}{target}~"


def definition_queue(target: str, name: str) -> str:
    return prefix(target) + name


def state_queue(target: str, name: str) -> str:
    return definition_queue(target, name) + STATE_SUFFIX


def schedule_of(stored: str, target: str) -> str | None:
    """The name of the schedule of ``target`` whose definition queue is ``stored``; None for
    any other name (a state queue, another target's)."""
    if not stored.startswith(prefix(target)) or stored.endswith(STATE_SUFFIX):
        return None
    name = stored[len(prefix(target)) :]
    return name if "~" not in name else None


def target_of(stored: str) -> str | None:
    """The target of the definition queue ``stored``; None when it is not one."""
    if not topics.is_internal(stored) or stored.endswith(STATE_SUFFIX):
        return None
    target = stored[len(topics.INTERNAL) :].rsplit("~", 1)[0]
    return target or None
