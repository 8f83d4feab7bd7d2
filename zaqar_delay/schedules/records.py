"""Where schedules are kept in the stores: each one's definition, state and last failure (the
metadata of its queues) and the ticks of its target's tick queue (``names.py``).

The bulk forms read and write many schedules of one target with one store call per store
(a round trip or two on Redis, one query on MongoDB), so that firing a batch of ticks costs
a few calls, not a few per schedule.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from zaqar_delay.encryption import MessageCipher
from zaqar_delay.models import Metadata, NewMessage
from zaqar_delay.schedules import names, sealing
from zaqar_delay.stores import Stores

if TYPE_CHECKING:
    from zaqar_delay.storage.base import Driver

#: A schedule's queues that hold metadata, by kind: its definition, state and last failure.
KINDS = (names.definition_queue, names.state_queue, names.error_queue)


class Records:
    """The definitions, states and ticks of every project's schedules, over ``stores``;
    ``cipher`` opens the message bodies of definitions sealed at rest (``sealing.py``)."""

    def __init__(self, stores: Stores, cipher: MessageCipher | None = None) -> None:
        self.stores = stores
        self.cipher = cipher

    def as_definition(self, project: str, metadata: Metadata | None) -> Metadata | None:
        """A definition queue's metadata as read (None when it holds no schedule), its
        message body opened."""
        if metadata is None or "schedule" not in metadata:
            return None
        stored = metadata["schedule"]
        opened = sealing.opened(stored, self.cipher, project)
        return metadata if opened is stored else {**metadata, "schedule": opened}

    def store_of(self, project: str, target: str, queue: str) -> Driver:
        """The store of ``queue``, one of ``target``'s schedule queues, about to be written.
        With pools that is ``target``'s pool (``target`` is placed first when it is placed
        nowhere, where its first message would place it): a schedule then lives where its
        queue does, of its queue's flavor, and is away only when its queue is. One of its
        queues placed elsewhere by an earlier release stays there."""
        self.stores.place(project, target)
        self.stores.colocate(project, target, queue)
        return self.stores.for_queue(project, queue)

    def definition(self, project: str, target: str, name: str) -> Metadata | None:
        """The definition queue's metadata; None when the schedule does not exist."""
        queue = names.definition_queue(target, name)
        stored = self.stores.for_queue(project, queue).get_metadata(project, queue)
        return self.as_definition(project, stored)

    def definitions(
        self, project: str, target: str, schedule_names: Iterable[str]
    ) -> dict[str, Metadata | None]:
        """Each named schedule's definition (None: it does not exist), in one read per store."""
        [definitions] = self._read(project, target, schedule_names, KINDS[:1])
        return {name: self.as_definition(project, m) for name, m in definitions.items()}

    def definitions_and_states(
        self, project: str, target: str, schedule_names: Iterable[str]
    ) -> tuple[dict[str, Metadata | None], dict[str, Metadata]]:
        """Each named schedule's definition (None: it does not exist) and state (``{}``
        before its first fire), in one read per store."""
        definitions, states = self._read(project, target, schedule_names, KINDS[:2])
        return {name: self.as_definition(project, m) for name, m in definitions.items()}, states

    def leftovers(self, project: str, target: str, name: str) -> list[str]:
        """The state and error queues of schedule ``name`` that exist although it does not (a
        fire that raced the deletion of an earlier schedule of that name wrote them), in one
        read per store."""
        queues = [kind(target, name) for kind in KINDS[1:]]
        read = self._metadata_of(project, queues)
        return [queue for queue, metadata in zip(queues, read, strict=True) if metadata is not None]

    def state(self, project: str, target: str, name: str) -> Metadata:
        """What the schedule's fires recorded (``{}`` before the first)."""
        queue = names.state_queue(target, name)
        return self.stores.for_queue(project, queue).get_metadata(project, queue) or {}

    def read(
        self, project: str, target: str, schedule_names: Iterable[str]
    ) -> tuple[dict[str, Metadata | None], dict[str, Metadata], dict[str, Metadata]]:
        """Each named schedule's definition (None: it does not exist), state (``{}`` before
        its first fire) and last failure (``{}``: none recorded), in one read per store."""
        definitions, states, failures = self._read(project, target, schedule_names, KINDS)
        opened = {name: self.as_definition(project, m) for name, m in definitions.items()}
        return opened, states, failures

    def write_states(
        self, project: str, target: str, states: Mapping[str, Metadata], now_ms: int
    ) -> None:
        """Record each schedule's state (its state queue is made by its first fire): one
        write per store that holds some."""
        self._write(project, target, names.state_queue, states, now_ms)

    def write_failures(
        self, project: str, target: str, failures: Mapping[str, Metadata], now_ms: int
    ) -> None:
        """Record each schedule's last failure (its error queue is made by its first): one
        write per store that holds some."""
        self._write(project, target, names.error_queue, failures, now_ms)

    def post_ticks(
        self, project: str, target: str, ticks: Sequence[NewMessage], client_id: str, now_ms: int
    ) -> None:
        """Post ``ticks`` to the target's tick queue in one post (none: nothing)."""
        if ticks:
            queue = names.tick_queue(target)
            store = self.store_of(project, target, queue)
            store.post_messages(project, queue, ticks, client_id, now_ms)

    def _write(
        self,
        project: str,
        target: str,
        kind: Callable[[str, str], str],
        by_name: Mapping[str, Metadata],
        now_ms: int,
    ) -> None:
        """Give each named schedule's queue of ``kind`` (a name of a schedule's queue) its
        metadata, creating it where it does not exist: one write per store that holds some."""
        queues = {kind(target, name): one for name, one in by_name.items()}
        locate = functools.partial(self.store_of, project, target)
        for store, some in _by_store(queues, locate):
            store.put_metadata_many(project, {queue: queues[queue] for queue in some}, now_ms)

    def _read(
        self,
        project: str,
        target: str,
        schedule_names: Iterable[str],
        kinds: Sequence[Callable[[str, str], str]],
    ) -> list[dict[str, Metadata]]:
        """For each of ``kinds`` (a name of each schedule's queue of that kind), the metadata
        of each named schedule's queue of that kind (``{}``: none), in one read per store."""
        named = list(schedule_names)
        queues = [kind(target, name) for kind in kinds for name in named]
        read = [metadata or {} for metadata in self._metadata_of(project, queues)]
        count = len(named)
        return [
            dict(zip(named, read[at * count : (at + 1) * count], strict=True))
            for at in range(len(kinds))
        ]

    def _metadata_of(self, project: str, queues: list[str]) -> list[Metadata | None]:
        """The metadata of each queue, in order: one bulk read per store that holds some
        (each queue may be placed on another pool)."""
        read: dict[str, Metadata | None] = {}
        for store, some in _by_store(queues, lambda queue: self.stores.for_queue(project, queue)):
            read.update(zip(some, store.get_metadata_many(project, some), strict=True))
        return [read[queue] for queue in queues]


def _by_store(
    queues: Iterable[str], locate: Callable[[str], Driver]
) -> list[tuple[Driver, list[str]]]:
    """``queues`` grouped by the store ``locate`` gives each, in their order."""
    groups: dict[int, tuple[Driver, list[str]]] = {}
    for queue in queues:
        store = locate(queue)
        groups.setdefault(id(store), (store, []))[1].append(queue)
    return list(groups.values())
