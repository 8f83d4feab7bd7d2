"""What the parts of the Swift driver share: the containers, message documents, index entries
and the claim slots that decide who holds a message.

A message's claims are numbered slots, ``<p>/<q>/m/<id>/<n>`` in the claims container, each
created only if absent (``If-None-Match: *``). Taking slot n + 1 is the one atomic step of a
claim: of any number of claimers, exactly one creates it. An index entry records the claim
count ``n`` it was written at, so a claimer creates slot ``n + 1`` straight away; if a claim
was taken since, that slot exists and the entry is stale. A slot holds the claim's id, its
expiry (0 once released or left) and the claim count (``cc``), which a slot voided before its
message was handed out does not raise.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import secrets
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any, Generic, TypeVar

from zaqar_delay import errors
from zaqar_delay.models import Message
from zaqar_delay.policy import QueuePolicy
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.connect import ConcurrentUpdate, SwiftClient
from zaqar_delay.storage.swift.timing import DELETE_AT_SLACK_S, SwiftTimes

# Facts this process has seen that never change, so reads look each one up once: posts of
# several messages committed, the slot a claim took of each of its messages, and how far each
# queue's messages are no longer claimable by their names.
FACTS_KEPT = 65_536

# Marks of a queue as subscribed tried while concurrent updates of its object overtake them.
MARK_ATTEMPTS = 10

Doc = dict[str, Any]
V = TypeVar("V")


class Facts(Generic[V]):
    """Facts by name that never change once true, the most recently learnt kept."""

    def __init__(self, kept: int = FACTS_KEPT) -> None:
        self._kept = kept
        self._known: collections.OrderedDict[str, V] = collections.OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, name: str) -> bool:
        with self._lock:
            return name in self._known

    def get(self, name: str) -> V | None:
        with self._lock:
            return self._known.get(name)

    def learn(self, name: str, fact: V) -> None:
        with self._lock:
            self._known[name] = fact
            if len(self._known) > self._kept:
                self._known.popitem(last=False)


QueueObject = tuple[str | None, bool]


class RecentQueueObjects:
    """Each queue's metadata object as this process last read it (see
    ``SwiftBase._queue_object``), usable until ``max_age_s`` after the read was sent: a read
    sent before a write ended may show what the write replaced, and expires by the time the
    write's caller answers (``SwiftBase._queue_object_written``)."""

    def __init__(self, max_age_s: float, kept: int = FACTS_KEPT) -> None:
        self.max_age_s = max_age_s
        self._kept = kept
        self._read: dict[str, tuple[float, QueueObject]] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> QueueObject | None:
        with self._lock:
            found = self._read.get(name)
        if found is None or found[0] + self.max_age_s <= time.monotonic():
            return None
        return found[1]

    def keep(self, name: str, sent_at: float, found: QueueObject) -> None:
        if self.max_age_s <= 0:
            return
        with self._lock:
            if len(self._read) >= self._kept:
                self._read.clear()
            self._read[name] = (sent_at, found)

    def forget(self, name: str) -> None:
        with self._lock:
            self._read.pop(name, None)


@dataclasses.dataclass(frozen=True, slots=True)
class Slot:
    """A message's latest claim slot: number ``n`` (0 for never claimed), the claim count,
    and the claim that holds it until ``expires_ms`` (0: released, or never)."""

    n: int = 0
    claim_count: int = 0
    claim_id: str = ""
    expires_ms: int = 0
    # When a claim took it (0: unknown, or not taken by a claim).
    taken_ms: int = 0
    # Makes each writer's document its own, so a creator can tell whether its write is kept.
    nonce: str = dataclasses.field(default_factory=lambda: secrets.token_hex(8), compare=False)

    def live(self, now_ms: int) -> bool:
        return bool(self.claim_id) and self.expires_ms > now_ms

    def document(self) -> bytes:
        return json.dumps(
            {
                "c": self.claim_id,
                "e": self.expires_ms,
                "cc": self.claim_count,
                "t": self.taken_ms,
                "k": self.nonce,
            }
        ).encode()

    def content_type(self) -> str:
        return names.content_type(c=self.claim_id, e=self.expires_ms, cc=self.claim_count)


def slot_from_document(n: int, document: bytes) -> Slot:
    """Slot ``n`` as :meth:`Slot.document` stored it."""
    doc = json.loads(document)
    return Slot(n, int(doc["cc"]), str(doc["c"]), int(doc["e"]), int(doc.get("t", 0)))


def slot_from_listing(entry: dict[str, Any]) -> Slot:
    fields = names.fields_of(entry["content_type"])
    return Slot(
        n=int(entry["name"].rsplit("/", 1)[1]),
        claim_count=int(fields.get("cc", 0)),
        claim_id=fields.get("c", ""),
        expires_ms=int(fields.get("e", 0)),
    )


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
        subscriptions (see ``names.SUBSCRIBED``; a queue that does not exist may)."""
        found = self._swift.get(self._container(names.QUEUES), names.queue_object(project, queue))
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
        created = self._swift.create(
            self._container(names.QUEUES),
            name,
            b"{}",
            names.content_type(cr=now_ms),
            {names.SUBSCRIBED: "0"},
        )
        if created:
            self._recent_queue_objects.keep(name, sent_at, ("{}", False))
        else:
            self._recent_queue_objects.forget(name)

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

    def _read_message(self, project: str, queue: str, message_id: str) -> Doc | None:
        """The message, or None when it is missing or its post was never committed."""
        found = self._swift.get(
            self._container(names.MESSAGES), self._message_name(project, queue, message_id)
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

    # -- claim slots ---------------------------------------------------------------------------

    def _slot_name(self, project: str, queue: str, message_id: str, n: int) -> str:
        return self._slots_prefix(project, queue, message_id) + names.number_part(n)

    def _take_slot(self, project: str, queue: str, message_id: str, slot: Slot) -> bool:
        """Create slot ``slot.n``, as the one creator Swift keeps; False when it existed or a
        concurrent creator's is kept."""
        return self._swift.create_settled(
            self._container(names.CLAIMS),
            self._slot_name(project, queue, message_id, slot.n),
            slot.document(),
            slot.content_type(),
        )

    def _write_slot(self, project: str, queue: str, message_id: str, slot: Slot) -> None:
        self._swift.put(
            self._container(names.CLAIMS),
            self._slot_name(project, queue, message_id, slot.n),
            slot.document(),
            slot.content_type(),
        )

    def _read_slot(self, project: str, queue: str, message_id: str, n: int) -> Slot | None:
        found = self._swift.get(
            self._container(names.CLAIMS),
            self._slot_name(project, queue, message_id, n),
            newest=True,
        )
        return None if found is None else slot_from_document(n, found[1])

    def _current_slot(self, project: str, queue: str, message_id: str) -> Slot:
        """The message's latest slot, read from the slot itself (``Slot()``: never claimed);
        a slot once created is always found (``SwiftClient.latest_numbered``)."""
        n, body = self._swift.latest_numbered(
            self._container(names.CLAIMS), self._slots_prefix(project, queue, message_id)
        )
        return Slot() if body is None else slot_from_document(n, body)

    def _slots_of(self, project: str, queue: str, message_ids: Sequence[str]) -> dict[str, Slot]:
        """The latest slot of each message as listings show it (claim count and holder for
        display; decisions read :meth:`_current_slot`)."""
        if not message_ids:
            return {}
        prefix = f"{names.queue_prefix(project, queue)}m/"
        ordered = sorted(message_ids)
        if len(ordered) <= 2:
            listed: Iterable[dict[str, Any]] = [
                entry
                for message_id in ordered
                for entry in self._swift.listing(
                    self._container(names.CLAIMS), f"{prefix}{message_id}/"
                )
            ]
        else:
            listed = self._swift.walk(
                self._container(names.CLAIMS),
                prefix,
                marker=f"{prefix}{ordered[0]}",
                end_marker=f"{prefix}{ordered[-1]}/~",
            )
        wanted = set(message_ids)
        slots: dict[str, Slot] = {}
        for entry in listed:
            message_id = entry["name"][len(prefix) :].split("/", 1)[0]
            if message_id in wanted:
                slots[message_id] = slot_from_listing(entry)  # name order: the last is latest
        return slots

    def _live_claim(self, project: str, queue: str, claim_id: str, now_ms: int) -> Doc | None:
        found = self._swift.get(
            self._container(names.CLAIMS), self._claim_name(project, queue, claim_id)
        )
        if found is None:
            return None
        doc = dict(json.loads(found[1]))
        return doc if int(doc["e"]) > now_ms else None

    def _holding_slot(
        self, project: str, queue: str, message_id: str, n: int, claim_id: str, now_ms: int
    ) -> Slot | None:
        """Slot ``n`` of the message when ``claim_id``'s live claim holds the message through
        it: the slot is the claim's, live, and the message's latest (no slot after it)."""
        later = self._swift.submit(self._read_slot, project, queue, message_id, n + 1)
        slot = self._read_slot(project, queue, message_id, n)
        if slot is None or slot.claim_id != claim_id or not slot.live(now_ms):
            return None
        return slot if later.result() is None else None

    def _slot_numbers(self, project: str, queue: str, claim_id: str) -> dict[str, int] | None:
        """{message id: slot number} of the messages the claim took (never changed after the
        claim is made, so known once read), or None when there is no such claim."""
        name = self._claim_name(project, queue, claim_id)
        known = self._claim_slots.get(name)
        if known is not None:
            return known
        found = self._swift.get(self._container(names.CLAIMS), name)
        if found is None:
            return None
        numbers = {str(i): int(n) for i, n in dict(json.loads(found[1])["m"]).items()}
        self._claim_slots.learn(name, numbers)
        return numbers

    def _check_claim(
        self, project: str, queue: str, slot: Slot, claim_id: str | None, now_ms: int
    ) -> None:
        """Refuse a change to a claimed message unless ``claim_id`` names its live claim."""
        live = slot.live(now_ms)
        if claim_id is None:
            if live:
                raise errors.MessageIsClaimed()
            return
        if not live:
            raise errors.ClaimNotValid(
                "A claim was specified, but the message is not currently claimed."
            )
        if slot.claim_id != claim_id:
            if self._live_claim(project, queue, claim_id, now_ms):
                raise errors.MessageIsClaimed()
            raise errors.ClaimNotValid("The specified claim does not exist or has expired.")

    def _remove_message(
        self,
        project: str,
        queue: str,
        message_id: str,
        doc: Doc | None,
        slot: Slot | None,
        held: bool = False,
        slots: int | None = None,
    ) -> None:
        """Delete the message, then what indexes it and its claim slots. A failure part-way
        leaves index entries without a message, which claimers remove when they meet them
        (``SwiftTimes.orphan_grace_ms``), or slots, which are never read again. ``held``: ``slot``'s
        live claim holds it, and that claim replaced its due entry with a claimed one, so
        only the latter is deleted (should the claimer have died before deleting the due
        entry, claimers remove it as any orphan). ``slots``: the number of its latest slot
        (0: it has none); by default ``slot``'s, else the slots are listed.

        A slot deleted after its message cannot hand the message out again: a claimer that
        creates a slot anew then finds no message and takes nothing."""
        self._swift.delete(
            self._container(names.MESSAGES), self._message_name(project, queue, message_id)
        )
        claims = self._container(names.CLAIMS)
        entries = []
        if doc is not None and not held and not doc.get("i"):
            entries.append(
                (names.INDEX, self._due_entry(project, queue, int(doc["d"]), message_id))
            )
        if slot is not None and slot.expires_ms:
            entries.append(
                (names.INDEX, self._claimed_entry(project, queue, slot.expires_ms, message_id))
            )
        highest = slot.n if slots is None and slot is not None else slots
        if highest is None:
            prefix = self._slots_prefix(project, queue, message_id)
            entries += [
                (names.CLAIMS, entry["name"]) for entry in self._swift.listing(claims, prefix)
            ]
        else:
            entries += [
                (names.CLAIMS, self._slot_name(project, queue, message_id, n))
                for n in range(1, highest + 1)
            ]
        self._swift.each(
            lambda item: self._swift.delete(self._container(item[0]), item[1]), entries
        )
