"""Where the Swift driver keeps what: containers, object names, and the fields it reads from
container listings without fetching objects.

Every queue's objects share a name prefix ``<project>/<queue>/`` (both percent-encoded, so
neither holds a ``/``) in a few containers of the driver's namespace:

- ``<ns>_queues``: ``<project>/<queue>``, the queue's metadata JSON, and in its ``SUBSCRIBED``
  header whether the queue may have subscriptions;
- ``<ns>_messages``: ``<p>/<q>/<id>``, one message each. An id begins with the time the
  message was due when posted, so the listing is in due order, and a message posted and not
  indexed since (its content type carries ``i=1``) is claimable by its name alone: a post
  writes one object;
- ``<ns>_index``: the claim index of the other messages, empty objects named for when a
  message is next claimable: ``<p>/<q>/d/<due>/<id>`` for an unclaimed message due at
  ``due`` (once rescheduled, given back by a claim, or a dead-letter copy),
  ``<p>/<q>/c/<expiry>/<id>`` for a claimed one whose claim ends at ``expiry`` (times as 13
  digits, so name order is time order and ``end_marker`` stops a listing at "now");
- ``<ns>_claims``: ``<p>/<q>/m/<id>/<n>``, a message's n-th claim (create-only: the number is
  taken once), and ``<p>/<q>/c/<claim id>``, a claim with the messages it took;
- ``<ns>_dedup``: ``<p>/<q>/<sha1 of the dedup id>/e<epoch>-<generation>``, create-only as
  well, one chain of generations per epoch (``dedup``); an earlier release named them
  ``<p>/<q>/<sha1>/<generation>``, which sorts before;
- ``<ns>_subscriptions``: see ``subscriptions``; ``<ns>_pushes``: see ``pushes``.

Listings return each object's content type, so messages and index entries carry the fields a
listing filters on as content-type parameters (``;e=<expiry>;u=<client>``...).
"""

from __future__ import annotations

import hashlib
import itertools
import re
import secrets
import threading
import urllib.parse
from collections.abc import Sequence

QUEUES, MESSAGES, INDEX, CLAIMS, DEDUP, SUBSCRIPTIONS, PUSHES = (
    "queues",
    "messages",
    "index",
    "claims",
    "dedup",
    "subscriptions",
    "pushes",
)
CONTAINERS = (QUEUES, MESSAGES, INDEX, CLAIMS, DEDUP, SUBSCRIPTIONS, PUSHES)
CONTENT_TYPE = "application/x-zaqar-delay"
# On a queue's metadata object: "0" while the queue has never had a subscription, so a post
# need not list its subscriptions; "1" once it may have. Queues stored before it have none,
# which reads as "1".
SUBSCRIBED = "X-Object-Meta-Subscribed"
# On a dedup generation: "stored" once its post stored its message, "lapsed" once it gave it
# up (``dedup.SwiftDedupRecords``); absent, its document's own ``s``.
DEDUP_STATE = "X-Object-Meta-State"


def may_have_subscriptions(queue_headers: dict[str, str]) -> bool:
    """Whether the queue whose metadata object has these headers (in lower case, as read)
    may have subscriptions: unless it is marked "0"."""
    return queue_headers.get(SUBSCRIBED.lower()) != "0"


TIME_DIGITS = 13
# Push times: parked pushes are owed at PARKED (2**51) + their time, sixteen digits.
PUSH_TIME_DIGITS = 16
# Claim and generation numbers in object names: six digits keep name order numeric order.
NUMBER_DIGITS = 6

# <due ms, 13 digits><process sequence, 12 digits><random, 8 hex>: due order, and posting
# order among messages due at the same millisecond in a process. Ids stored by earlier
# releases begin with the creation time instead.
ID_PATTERN = re.compile(r"^\d{25}[0-9a-f]{8}$")
_sequence = itertools.count()
_sequence_lock = threading.Lock()


def new_ids(due_ms: Sequence[int]) -> list[str]:
    """Fresh message ids for messages due at ``due_ms``, each beginning with its due time and
    sorting after every id this process made for that time."""
    with _sequence_lock:
        first = next(_sequence)
        for _ in range(len(due_ms) - 1):
            next(_sequence)
    return [
        f"{due:0{TIME_DIGITS}d}{first + i:012d}{secrets.token_hex(4)}"
        for i, due in enumerate(due_ms)
    ]


def named_ms_of(message_id: str) -> int:
    """The time a message id begins with: when the message was due when posted (its
    creation, for an id stored by an earlier release). Never before its creation."""
    return int(message_id[:TIME_DIGITS])


def claimable_by_name(listed_fields: dict[str, str]) -> bool:
    """Whether a message, by the fields of its listed content type, is claimable by its name
    (``i=1``: posted and not indexed since)."""
    return listed_fields.get("i") == "1"


def sequence_of(message_id: str) -> str:
    """The part of a message id that orders the ids a process made by when it made them."""
    return message_id[TIME_DIGITS:]


def is_message_id(text: str) -> bool:
    return ID_PATTERN.match(text) is not None


def time_part(ms: int) -> str:
    return f"{max(ms, 0):0{TIME_DIGITS}d}"


def push_time_part(ms: int) -> str:
    return f"{max(ms, 0):0{PUSH_TIME_DIGITS}d}"


def number_part(n: int) -> str:
    return f"{n:0{NUMBER_DIGITS}d}"


EPOCH_DIGITS = 8


def dedup_chain(id_prefix: str, epoch: int | None) -> str:
    """The name prefix of a dedup id's chain of ``epoch`` (``id_prefix``: ``<p>/<q>/<sha1>/``);
    None: the chain an earlier release wrote, named without an epoch."""
    return id_prefix if epoch is None else f"{id_prefix}e{epoch:0{EPOCH_DIGITS}d}-"


def dedup_generation(id_prefix: str, epoch: int | None, number: int) -> str:
    return dedup_chain(id_prefix, epoch) + number_part(number)


def dedup_place(id_prefix: str, name: str) -> tuple[int | None, int]:
    """The chain's epoch (None: an earlier release's) and the number of the generation
    ``name`` of the id whose names begin ``id_prefix``."""
    part = name[len(id_prefix) :]
    if part.startswith("e"):
        epoch, number = part[1:].split("-")
        return int(epoch), int(number)
    return None, int(part)


def quoted(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def project_prefix(project: str) -> str:
    """``<project>/``: every object of the project's queues, in every container (in
    ``queues``, the queues themselves)."""
    return f"{quoted(project)}/"


def queue_prefix(project: str, queue: str) -> str:
    """``<project>/<queue>/``: every object of the queue, in every container but ``queues``."""
    return f"{project_prefix(project)}{quoted(queue)}/"


def queue_object(project: str, queue: str) -> str:
    return f"{project_prefix(project)}{quoted(queue)}"


def queue_name_of(object_name: str) -> str:
    return urllib.parse.unquote(object_name.rsplit("/", 1)[1])


def dedup_key(dedup_id: str) -> str:
    return hashlib.sha1(dedup_id.encode()).hexdigest()


def content_type(**fields: str | int) -> str:
    """The content type carrying ``fields`` as parameters, values percent-encoded."""
    params = "".join(f";{key}={quoted(str(value))}" for key, value in fields.items())
    return CONTENT_TYPE + params


def fields_of(listed_content_type: str) -> dict[str, str]:
    """The parameters :func:`content_type` stored, decoded."""
    fields = {}
    for part in listed_content_type.split(";")[1:]:
        key, _, value = part.strip().partition("=")
        fields[key] = urllib.parse.unquote(value)
    return fields
