"""Queues on Swift: one metadata object per queue, and per-queue counts from listings."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from zaqar_delay import errors, topics
from zaqar_delay.models import MessageRef, Metadata, QueueInfo, QueueStats
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.common import SwiftBase


class QueueOps(SwiftBase):
    """Create, read, change, list, count, purge and delete queues."""

    def create_queue(self, project: str, queue: str, metadata: Metadata, now_ms: int) -> bool:
        created = self._create_queue_object(project, queue, metadata, now_ms)
        if created:
            self._adopt_subscriptions(project, queue)
            self._queue_object_written(project, queue)
        return created

    def get_metadata(self, project: str, queue: str) -> Metadata | None:
        text = self._metadata_text(project, queue)
        return None if text is None else dict(json.loads(text))

    def get_metadata_many(self, project: str, queues: Sequence[str]) -> list[Metadata | None]:
        """The queues read at once."""
        return self._swift.each(lambda queue: self.get_metadata(project, queue), queues)

    def set_metadata(self, project: str, queue: str, metadata: Metadata) -> None:
        """Checks the queue exists first: a delete in between is not seen (Swift has no
        conditional overwrite), and recreates the queue with this metadata.

        The write keeps the ``SUBSCRIBED`` mark it read. A subscription created meanwhile
        marks the queue before it is written, which this write may undo: so a write that
        leaves the queue unmarked then looks for subscriptions and marks it if there are any,
        and a subscription checks the mark once it is written (see ``create_subscription``).
        One of the two sees the other."""
        container, name = self._container(names.QUEUES), names.queue_object(project, queue)
        headers = self._swift.head(container, name)
        if headers is None:
            raise errors.QueueDoesNotExist(queue, project)
        marked = names.may_have_subscriptions(headers)
        self._swift.put(
            container,
            name,
            json.dumps(metadata).encode(),
            names.CONTENT_TYPE,
            {names.SUBSCRIBED: "1" if marked else "0"},
        )
        if not marked and self._has_subscriptions(project, queue):
            self._mark_subscribed(project, queue)
        self._queue_object_written(project, queue)

    def put_metadata_many(
        self, project: str, metadata: Mapping[str, Metadata], now_ms: int
    ) -> None:
        """The queues written at once, each as the contract's default writes one."""
        put_one = super().put_metadata_many
        self._swift.each(lambda item: put_one(project, dict([item]), now_ms), metadata.items())

    def purge(self, project: str, queue: str) -> None:
        prefix = names.queue_prefix(project, queue)
        # Messages first, as one message is deleted: entries left by a failure part-way are
        # removed by the claims that meet them.
        for kind in (names.MESSAGES, names.INDEX, names.CLAIMS, names.DEDUP):
            self._swift.delete_all(self._container(kind), prefix)

    def delete_queue(self, project: str, queue: str) -> None:
        self.purge(project, queue)
        self.purge_subscriptions(project, queue)
        self._swift.delete(self._container(names.QUEUES), names.queue_object(project, queue))
        self._queue_object_written(project, queue)

    def list_queues(
        self, project: str, marker: str | None, limit: int, detailed: bool
    ) -> list[QueueInfo]:
        prefix = names.project_prefix(project)
        start = prefix + names.quoted(marker) if marker else ""
        listed = self._swift.listing(
            self._container(names.QUEUES), prefix, marker=start, limit=limit
        )
        queues = [names.queue_name_of(entry["name"]) for entry in listed]
        if not detailed:
            return [QueueInfo(queue, None) for queue in queues]
        metadata = self._swift.each(lambda q: self.get_metadata(project, q), queues)
        return [
            QueueInfo(queue, found)
            for queue, found in zip(queues, metadata, strict=True)
            if found is not None
        ]

    def count_queues(self, project: str) -> int:
        return sum(
            1
            for _ in self._swift.walk(self._container(names.QUEUES), names.project_prefix(project))
        )

    def count_messages(self, project: str, most: int, now_ms: int) -> int:
        """The project's message objects, from listings of its names (messages of a post not
        committed yet count too), stopped at ``most`` or at the server's own queues (they sort
        last)."""
        prefix, counted = names.project_prefix(project), 0
        for entry in self._swift.walk(self._container(names.MESSAGES), prefix):
            if entry["name"].startswith(prefix + names.quoted(topics.INTERNAL)):
                break
            # <project>/<queue>/<message id>: deeper names are not messages.
            if entry["name"].count("/", len(prefix)) != 1:
                continue
            if int(names.fields_of(entry["content_type"])["e"]) > now_ms:
                counted += 1
                if counted >= most:
                    break
        return counted

    def holds_queues(self) -> bool:
        return bool(self._swift.listing(self._container(names.QUEUES), "", limit=1))

    def stats(self, project: str, queue: str, now_ms: int) -> QueueStats:
        """Counted from listings: names and content types, no message is read."""
        prefix = names.queue_prefix(project, queue)
        total, refs = 0, []
        delayed, next_due = 0, None
        messages = [
            entry
            for entry in self._swift.walk(self._container(names.MESSAGES), prefix)
            if "/" not in entry["name"][len(prefix) :]
        ]
        for entry in self._committed_listing(project, queue, messages):
            message_id = entry["name"][len(prefix) :]
            fields = names.fields_of(entry["content_type"])
            if int(fields["e"]) > now_ms:
                total += 1
                # Messages stored by earlier releases tell their creation by their ids only.
                created_ms = int(fields.get("cr") or names.named_ms_of(message_id))
                refs.append(MessageRef(message_id, created_ms))
                if names.claimable_by_name(fields) and int(fields["d"]) > now_ms:
                    delayed += 1  # claimable by its name, and not due yet
                    next_due = min(next_due or int(fields["d"]), int(fields["d"]))
        oldest = min(refs, key=_creation_order, default=None)
        newest = max(refs, key=_creation_order, default=None)
        claimed = sum(
            1
            for entry in self._swift.walk(
                self._container(names.INDEX),
                f"{prefix}c/",
                marker=f"{prefix}c/" + names.time_part(now_ms) + "/~",
            )
            if int(names.fields_of(entry["content_type"])["e"]) > now_ms
        )
        later = self._swift.walk(
            self._container(names.INDEX),
            f"{prefix}d/",
            marker=f"{prefix}d/{names.time_part(now_ms)}/~",
        )
        for entry in self._committed_listing(project, queue, list(later)):
            if int(names.fields_of(entry["content_type"])["e"]) > now_ms:
                delayed += 1
                due = int(entry["name"].rsplit("/", 2)[1])
                next_due = min(next_due or due, due)
        return QueueStats(
            total=total,
            claimed=claimed,
            delayed=delayed,
            next_due_ms=next_due,
            expired=0,  # expired messages are removed as claims meet them, uncounted
            oldest=oldest,
            newest=newest,
        )


def _creation_order(ref: MessageRef) -> tuple[int, str]:
    """Creation time, then posting order in a process (the sequence number in the id)."""
    return ref.created_ms, names.sequence_of(ref.id)
