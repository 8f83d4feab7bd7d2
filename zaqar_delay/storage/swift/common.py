"""What the parts of the Swift driver share: the containers, queue objects, message documents
and index entries (``SwiftBase``); the claim slots are in ``slots.py`` and ``slot_ops.py``.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

from zaqar_delay import errors
from zaqar_delay.models import Message, Metadata
from zaqar_delay.policy import QueuePolicy
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.caches import Facts, QueueObject, RecentQueueObjects
from zaqar_delay.storage.swift.connect import ConcurrentUpdate, SwiftClient
from zaqar_delay.storage.swift.slots import Slot
from zaqar_delay.storage.swift.timing import DELETE_AT_SLACK_S, SwiftTimes

# Marks of a queue as subscribed tried while concurrent updates of its object overtake them.
MARK_ATTEMPTS = 10

Doc = dict[str, Any]


def delete_at(expires_ms: int) -> dict[str, str]:
    """The ``X-Delete-At`` header letting Swift reclaim an object of a message expiring at
    ``expires_ms``; none when that moment has passed by the wall clock (Swift refuses it)."""
    at = expires_ms // 1000 + DELETE_AT_SLACK_S
    return {"X-Delete-At": str(at)} if at > time.time() + 1 else {}


def message_content_type(doc: Doc) -> str:
    """The content type of the message ``doc``: the fields listings filter on, and ``i=1``
    while it is claimable by its name (see ``names``)."""
    named = {"i": 1} if doc.get("i") else {}
    return names.content_type(
        e=doc["e"], d=doc["d"], u=doc["u"], bt=doc.get("bt", ""), cr=doc["cr"], **named
    )


def is_named_entry(name: str) -> bool:
    """Whether the due entry ``name`` stands for a message claimable by its name, rather than
    being an object of the index (see ``SwiftBase._named_entry``)."""
    return name.rsplit("/", 3)[1] == "i"


def message_of(message_id: str, doc: Doc, slot: Slot, now_ms: int) -> Message:
    return Message(
        id=message_id,
        body=json.loads(doc["b"]),
        ttl_s=int(doc["t"]),
        created_ms=int(doc["cr"]),
        expires_ms=int(doc["e"]),
        due_ms=int(doc["d"]),
        claim_id=slot.claim_id if slot.live(now_ms) else None,
        claim_count=slot.claim_count,
        client_id=doc["u"],
        hops=int(doc.get("h", 0)),
    )


def redelivery_due(policy: QueuePolicy, due_ms: int, claim_count: int, base_ms: int) -> int:
    """When a message leaving its claim at ``base_ms`` is due: its own due time, or with a
    ``_retry_backoff`` policy base + min(max, initial * factor ^ (claim_count - 1)) seconds."""
    backoff = policy.retry_backoff
    if backoff is None:
        return due_ms
    return int(base_ms + 1000 * backoff.delay_s(claim_count))


class SwiftBase(Driver):
    """The containers and helpers every part of the driver uses."""

    _swift: SwiftClient
    _times: SwiftTimes
    _namespace: str
    _list_scan_budget: int
    _committed_posts: Facts[bool]
    # Claim object name -> {message id: the slot number the claim took}.
    _claim_slots: Facts[dict[str, int]]
    # Queue prefix -> a message name before which no message is claimable by its name.
    _named_frontiers: Facts[str]
    _recent_queue_objects: RecentQueueObjects

    # -- names ---------------------------------------------------------------------------------

    def _container(self, kind: str) -> str:
        return f"{self._namespace}_{kind}"

    def _message_name(self, project: str, queue: str, message_id: str) -> str:
        return names.queue_prefix(project, queue) + message_id

    def _due_entry(self, project: str, queue: str, due_ms: int, message_id: str) -> str:
        return f"{names.queue_prefix(project, queue)}d/{names.time_part(due_ms)}/{message_id}"

    def _named_entry(self, project: str, queue: str, due_ms: int, message_id: str) -> str:
        """What claims call a message claimable by its name (``i=1``; see ``names``): the name
        of a due entry of kind ``i``, which no object has."""
        return f"{names.queue_prefix(project, queue)}i/{names.time_part(due_ms)}/{message_id}"

    def _claimed_entry(self, project: str, queue: str, expires_ms: int, message_id: str) -> str:
        return f"{names.queue_prefix(project, queue)}c/{names.time_part(expires_ms)}/{message_id}"

    def _slots_prefix(self, project: str, queue: str, message_id: str) -> str:
        return f"{names.queue_prefix(project, queue)}m/{message_id}/"

    def _claim_name(self, project: str, queue: str, claim_id: str) -> str:
        return f"{names.queue_prefix(project, queue)}c/{claim_id}"

    # -- queues --------------------------------------------------------------------------------

    def _metadata_text(self, project: str, queue: str) -> str | None:
        return self._queue_object(project, queue)[0]

    def _recent_queue_object(self, project: str, queue: str) -> QueueObject:
        """:meth:`_queue_object` as read at most ``metadata_cache_ms`` ago by this process:
        what a post goes by. Writes that posts must see wait until it has expired
        (:meth:`_queue_object_written`)."""
        name = names.queue_object(project, queue)
        found = self._recent_queue_objects.get(name)
        if found is None:
            sent_at = time.monotonic()
            found = self._queue_object(project, queue)
            self._recent_queue_objects.keep(name, sent_at, found)
        return found

    def _queue_object_written(self, project: str, queue: str) -> None:
        """After a write of the queue's metadata object that posts must see (its metadata,
        its existence, its first subscription): wait until no process goes by a copy read
        before the write, so every post that starts after the caller answers sees it."""
        self._recent_queue_objects.forget(names.queue_object(project, queue))
        time.sleep(self._recent_queue_objects.max_age_s)

    def _queue_object(self, project: str, queue: str) -> QueueObject:
        """The queue's metadata text (None: no such queue), and whether it may have
        subscriptions (see ``names.SUBSCRIBED``; a queue that does not exist may). A 404 is
        read again (``known``): a read racing a metadata write may answer 404, and a post
        would then go by no metadata (no default delay) until this process reads it again."""
        name = names.queue_object(project, queue)
        found = self._swift.get(self._container(names.QUEUES), name, known=True)
        if found is None:
            return None, True
        headers, body = found
        return body.decode(), names.may_have_subscriptions(headers)

    def _ensure_queue(self, project: str, queue: str, now_ms: int) -> None:
        """Create the queue, with no metadata, unless it exists. Posts of this process then
        go by what it created (nothing is there to see yet that a read would show), or read
        the queue that existed."""
        name = names.queue_object(project, queue)
        sent_at = time.monotonic()
        created = self._create_queue_object(project, queue, {}, now_ms)
        if created and not self._adopt_subscriptions(project, queue):
            self._recent_queue_objects.keep(name, sent_at, ("{}", False))
        else:
            self._recent_queue_objects.forget(name)

    def _create_queue_object(
        self, project: str, queue: str, metadata: Metadata, now_ms: int
    ) -> bool:
        """Create the queue's metadata object (unmarked: no subscriptions) unless it exists;
        whether this call created it. Read first: a metadata write or a subscription mark
        replacing the object hides it from a create-only write at that moment, which would
        store this metadata over the queue's. Settled: of concurrent creations (a PUT of the
        queue beside a subscription or a post that creates it), Swift keeps one, and only
        its creator may say it created the queue; the others found it made (a PUT answers
        that it existed, with the metadata kept, not its own). Creations of the same
        metadata may all say so: they made the same queue."""
        return self._swift.create_settled(
            self._container(names.QUEUES),
            names.queue_object(project, queue),
            json.dumps(metadata).encode(),
            names.content_type(cr=now_ms),
            {names.SUBSCRIBED: "0"},
            read_first=True,
        )

    def _adopt_subscriptions(self, project: str, queue: str) -> bool:
        """Mark the queue just created (unmarked) when subscriptions of it are stored
        already: one a creation stored while a deletion of the queue removed the object it
        had marked (its check after the write finds no object, so no mark to restore).
        Whether it had some."""
        if not self._has_subscriptions(project, queue):
            return False
        self._mark_subscribed(project, queue)
        return True

    def _mark_subscribed(self, project: str, queue: str) -> None:
        """Record that the queue may have subscriptions, so posts look for them. An update
        that overtook this one (concurrent subscriptions mark it too) leaves the mark to be
        read again, and set again if that update was a metadata write without it."""
        container, name = self._container(names.QUEUES), names.queue_object(project, queue)
        for _ in range(MARK_ATTEMPTS):
            try:
                self._swift.set_user_metadata(container, name, {names.SUBSCRIBED: "1"})
                return
            except ConcurrentUpdate:
                if self._marked_subscribed(project, queue):
                    return
        raise errors.StorageUnavailable("The queue kept changing while it was marked.")

    def _has_subscriptions(self, project: str, queue: str) -> bool:
        """Whether any subscription of the queue is stored, live or not."""
        prefix = f"{names.queue_prefix(project, queue)}s/"
        return bool(self._swift.listing(self._container(names.SUBSCRIPTIONS), prefix, limit=1))

    def _marked_subscribed(self, project: str, queue: str) -> bool:
        headers = self._swift.head(
            self._container(names.QUEUES), names.queue_object(project, queue)
        )
        return headers is None or names.may_have_subscriptions(headers)

    def _policy(self, project: str, queue: str) -> QueuePolicy:
        text = self._metadata_text(project, queue)
        return QueuePolicy.of(json.loads(text) if text else {})

    # -- messages ------------------------------------------------------------------------------

    def _read_message(
        self, project: str, queue: str, message_id: str, *, known: bool = False
    ) -> Doc | None:
        """The message, or None when it is missing or its post was never committed.
        ``known``: a message that should be there (a client, a claim, a push or a listed
        entry names it), whose 404 is read again before it is believed: an edit, a claim or
        a release overwrites it, and a read racing that may answer 404 (a delete would then
        leave it, a claimer drop its entry). A claimer meeting the entry of a message posted
        within the orphan grace reads once: a post still writing it is a usual answer."""
        found = self._swift.get(
            self._container(names.MESSAGES),
            self._message_name(project, queue, message_id),
            known=known,
        )
        if found is None:
            return None
        headers, body = found
        doc = dict(json.loads(body))
        # Whether it is claimable by its name is in its content type, which a claim changes.
        doc["i"] = int(names.fields_of(headers.get("content-type", "")).get("i", 0))
        return doc if self._committed(project, queue, doc.get("bt", "")) else None

    def _post_name(self, project: str, queue: str, post: str) -> str:
        """The object that commits a post of several messages (``post``: its first id)."""
        return f"{names.queue_prefix(project, queue)}b/{post}"

    def _committed(self, project: str, queue: str, post: str) -> bool:
        """Whether the post a message belongs to (``bt``; "" for a post of one message,
        which its one write commits) was committed."""
        if not post:
            return True
        name = self._post_name(project, queue, post)
        if name in self._committed_posts:
            return True
        if not self._swift.exists(self._container(names.MESSAGES), name):
            return False
        self._committed_posts.learn(name, True)
        return True

    def _committed_listing(
        self, project: str, queue: str, entries: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The message listing ``entries`` whose posts were committed."""
        posts = {names.fields_of(e["content_type"]).get("bt", "") for e in entries}
        done = {post for post in posts if self._committed(project, queue, post)}
        return [e for e in entries if names.fields_of(e["content_type"]).get("bt", "") in done]

    def _write_message(self, project: str, queue: str, message_id: str, doc: Doc) -> None:
        """Store the message ``doc``, claimable by its name if ``doc["i"]`` says so."""
        self._swift.put(
            self._container(names.MESSAGES),
            self._message_name(project, queue, message_id),
            json.dumps({key: value for key, value in doc.items() if key != "i"}).encode(),
            message_content_type(doc),
            delete_at(int(doc["e"])),
        )

    def _unname(self, project: str, queue: str, message_id: str, doc: Doc) -> None:
        """Make the message (``doc``, as read) no longer claimable by its name, once an index
        entry makes it claimable: its content type loses ``i``, and listings show that at
        once. Nothing when it is gone, or when a newer write of it overtook this one."""
        with contextlib.suppress(ConcurrentUpdate):
            self._swift.set_content_type(
                self._container(names.MESSAGES),
                self._message_name(project, queue, message_id),
                message_content_type({**doc, "i": 0}),
                delete_at(int(doc["e"])),
            )

    def _write_due_entry(
        self, project: str, queue: str, message_id: str, doc: Doc, latest: Slot
    ) -> None:
        """Make the unclaimed message claimable at its due time ``doc["d"]``; ``latest`` is
        its latest slot, so a claimer creates the one after it."""
        self._swift.put(
            self._container(names.INDEX),
            self._due_entry(project, queue, int(doc["d"]), message_id),
            b"",
            names.content_type(
                e=doc["e"], u=doc["u"], n=latest.n, cc=latest.claim_count, bt=doc.get("bt", "")
            ),
            delete_at(int(doc["e"])),
        )

    def _write_claimed_entry(
        self, project: str, queue: str, message_id: str, doc: Doc, slot: Slot
    ) -> None:
        """Make the message claimable again when ``slot``'s claim ends, unless it is renewed,
        released or the message deleted first."""
        self._swift.put(
            self._container(names.INDEX),
            self._claimed_entry(project, queue, slot.expires_ms, message_id),
            b"",
            names.content_type(
                e=doc["e"],
                u=doc["u"],
                d=doc["d"],
                n=slot.n,
                cc=slot.claim_count,
                c=slot.claim_id,
            ),
            delete_at(max(int(doc["e"]), slot.expires_ms)),
        )

    def _delete_index_entry(self, name: str) -> None:
        """Delete the index entry ``name``; nothing for the entry of a message claimable by
        its name, which is no object (:meth:`_unname` ends that)."""
        if not is_named_entry(name):
            self._swift.delete(self._container(names.INDEX), name)
