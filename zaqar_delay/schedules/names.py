"""Where schedules live: queues of the server's own (``topics.INTERNAL``).

For a target (the stored name of a queue or topic; a topic's starts with ``~``):

- ``~~<target>~`` holds the *ticks* of all the target's schedules: each a message due just
  before a schedule's next slot, which the push machinery hands to ``push/schedules.py`` (the
  queue's one subscription, ``zaqar-schedule:``) at its due time. One queue for all of them,
  so a dispatcher leases and settles the ticks of many schedules in one store call;
- ``~~<target>~<name>`` holds schedule ``name``'s definition in its metadata, written only
  when a client writes the schedule;
- ``~~<target>~<name>~s`` holds, in its metadata, what the schedule's fires did (how many,
  the last one), written only by fires, so a client's write and a fire never overwrite
  each other;
- ``~~<target>~<name>~e`` holds, in its metadata, the last fire that failed (what failed,
  when, since when), written only by fires that fail, so a failure never overwrites what a
  fire that succeeded recorded, nor the reverse.

Neither a queue's name nor a schedule's holds a ``~`` (a schedule's name follows a queue's
rules), so every name reads back one way (:func:`parse`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from zaqar_delay import topics

#: The subscriber of a target's tick queue: its ticks go to ``push/schedules.py``.
SCHEDULE_SUBSCRIBER = "zaqar-schedule:"
#: How a tick whose fire fails (a store away, a message the target refuses) is retried,
#: whatever its tick queue's metadata says (``push/settling.py``): at once, then at most 30 s
#: apart, and never given up. It is the one link to its schedule's next slot, so a tick given
#: up ended the schedule (it was, after about 50 minutes, by the policy an earlier release
#: stored in tick queues). Once a fire succeeds, the slots missed fire by ``misfire``.
TICK_RETRIES: Mapping[str, int] = {
    "retries_with_no_delay": 3,
    "minimum_delay_retries": 10,
    "minimum_delay": 1,
    "maximum_delay": 30,
    "maximum_delay_retries": 2**31 - 1,
}


#: The kinds of a schedule's queues named after its definition queue, by suffix.
SUFFIXES: Mapping[str, str] = {"s": "state", "e": "error"}


@dataclasses.dataclass(frozen=True, slots=True)
class Parsed:
    """What a queue of the server's own holds: ``kind`` is ``ticks``, ``definition``,
    ``state`` or ``error``; ``name`` is the schedule's ("" for the tick queue)."""

    target: str
    name: str
    kind: str


def prefix(target: str) -> str:
    """What the names of every schedule queue of ``target`` start with (they sort together);
    it is also the name of the target's tick queue, which sorts first."""
    return f"{topics.INTERNAL}{target}~"


def tick_queue(target: str) -> str:
    return prefix(target)


def definition_queue(target: str, name: str) -> str:
    return prefix(target) + name


def state_queue(target: str, name: str) -> str:
    return definition_queue(target, name) + "~s"


def error_queue(target: str, name: str) -> str:
    return definition_queue(target, name) + "~e"


def fire_dedup_id(name: str, key: str) -> str:
    """The dedup id of the message schedule ``name`` posts for ``key`` (a slot's epoch ms,
    or a run's key), in its target: one message per key, however often it is fired."""
    return f"schedule:{name}:{key}"


def parse(stored: str) -> Parsed | None:
    """What the stored name ``stored`` is, None for one that is not a schedule queue."""
    if not topics.is_internal(stored):
        return None
    parts = stored[len(topics.INTERNAL) :].split("~")
    if parts[0] == "":  # a topic's target: its mark, then its name
        target, rest = topics.MARK + parts[1] if len(parts) > 1 else "", parts[2:]
    else:
        target, rest = parts[0], parts[1:]
    if not target or target == topics.MARK:
        return None
    if rest == [""]:
        return Parsed(target, "", "ticks")
    if len(rest) == 1 and rest[0]:
        return Parsed(target, rest[0], "definition")
    if len(rest) == 2 and rest[0] and rest[1] in SUFFIXES:
        return Parsed(target, rest[0], SUFFIXES[rest[1]])
    return None


def is_tick_queue(stored: str) -> bool:
    """Whether ``stored`` is a target's tick queue."""
    parsed = parse(stored)
    return parsed is not None and parsed.kind == "ticks"


def schedule_of(stored: str, target: str) -> str | None:
    """The name of ``target``'s schedule whose definition queue is ``stored``, else None."""
    parsed = parse(stored)
    if parsed is None or parsed.kind != "definition" or parsed.target != target:
        return None
    return parsed.name
