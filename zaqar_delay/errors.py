"""The error hierarchy of the service.

Storage drivers and the service raise these; ``api/errors.py`` maps each class to one HTTP status
and JSON body, once, at the boundary. Every error carries the ``description`` a person reads.
"""

from __future__ import annotations

from typing import Any

from zaqar_delay import topics


class ZaqarDelayError(Exception):
    """Base class: ``description`` is the human-readable reason."""

    title = "Internal server error"

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


class InvalidRequest(ZaqarDelayError):
    """The request is well formed but breaks a rule of the API (400)."""

    title = "Invalid API request"


class PostTooLarge(InvalidRequest):
    """A post (or an edit) of more bytes than its queue's size limit."""


class TtlAlreadyLapsed(InvalidRequest):
    """An edit's ttl, counted from the message's creation, would have it expired already."""

    def __init__(self, ttl_s: int) -> None:
        super().__init__(
            f"A ttl of {ttl_s} seconds, counted from the message's creation, has already run "
            "out: give a longer ttl, or delete the message."
        )


class RequestTimeout(ZaqarDelayError):
    """The client did not send the whole request in time (408)."""

    title = "Request timeout"


class InvalidBody(ZaqarDelayError):
    """The request body cannot be parsed or has fields of the wrong type (400)."""

    title = "Invalid request body"


class InvalidParameter(ZaqarDelayError):
    """A query-string parameter is malformed (400)."""

    title = "Invalid parameter"


class NotFound(ZaqarDelayError):
    """The addressed queue, message or claim does not exist (404)."""

    title = "Not found"


class QueueDoesNotExist(NotFound):
    def __init__(self, queue: str, project: str) -> None:
        super().__init__(
            f"{topics.described(queue).capitalize()} does not exist for project {project}"
        )


class ClaimDoesNotExist(NotFound):
    def __init__(self, claim_id: str, queue: str, project: str) -> None:
        super().__init__(
            f"Claim {claim_id} does not exist in {topics.described(queue)} for project {project}"
        )


class SubscriptionDoesNotExist(NotFound):
    def __init__(self, subscription_id: str, queue: str, project: str) -> None:
        super().__init__(
            f"Subscription {subscription_id} does not exist in {topics.described(queue)} "
            f"for project {project}"
        )


class MessageDoesNotExist(NotFound):
    def __init__(self, message_id: str, queue: str, project: str) -> None:
        super().__init__(
            f"Message {message_id} does not exist in {topics.described(queue)} "
            f"for project {project}"
        )


class Conflict(ZaqarDelayError):
    """The change contradicts the resource's current state (409)."""

    title = "Resource conflict"


class MessageIsClaimed(ZaqarDelayError):
    """Delete refused: the message is held by a live claim the caller did not name (403)."""

    title = "Unable to delete"

    def __init__(self) -> None:
        super().__init__("This message is claimed; it cannot be deleted without a valid claim ID.")


class ClaimNotValid(ZaqarDelayError):
    """Delete refused: the named claim does not (or no longer) hold the message (400)."""

    title = "Unable to delete"


class Forbidden(ZaqarDelayError):
    """Policy denies the caller this route, or the resource's state this change (403)."""

    title = "Not authorized"

    def __init__(
        self,
        description: str = "You are not authorized to complete this action.",
        title: str | None = None,
    ) -> None:
        super().__init__(description)
        if title is not None:
            self.title = title


class QuotaExceeded(Forbidden):
    """A project or queue is at one of its configured limits (queues per project,
    subscriptions per queue or per project): 403."""

    def __init__(self, description: str) -> None:
        super().__init__(description, title="Quota exceeded")


class PushLoopRefused(Forbidden):
    """A post that came through more pushes of this service than ``[transport]
    max_push_hops`` allows (``push_hops``): 403, so the push that made it fails for good."""

    def __init__(self, description: str) -> None:
        super().__init__(description, title="Push loop refused")


class TooManyRequests(ZaqarDelayError):
    """The caller's project holds as many of a resource of this server process as it may
    (waiting claims): 429, to try again after ``retry_after_s`` seconds."""

    title = "Too many requests"

    def __init__(self, description: str, retry_after_s: int = 1) -> None:
        super().__init__(description)
        self.retry_after_s = retry_after_s


class PoolRefused(InvalidRequest):
    """A pool or flavor change the catalog cannot take (400): an unknown pool, pools of
    different capabilities in one flavor."""

    title = "Unable to create pool"

    def __init__(self, description: str, title: str | None = None) -> None:
        super().__init__(description)
        if title is not None:
            self.title = title


class NoPoolFound(ZaqarDelayError):
    """No registered pool can take a new queue (503, as Zaqar)."""

    title = "Service temporarily unavailable"


class StorageUnavailable(ZaqarDelayError):
    """The store did not answer in time or refused the connection (503). The description
    names the store's own failure: it is logged, and the client gets a generic one, unless
    ``tells_the_client`` says the description is written for the client."""

    title = "Service temporarily unavailable"
    tells_the_client = False


class FirstPostPending(StorageUnavailable):
    """A repeat of a post waited as long as a request waits for the first post of one of its
    dedup ids, which may still be storing its message (503): to try again after
    ``retry_after_s`` seconds, when that post is past its grace on any clock."""

    tells_the_client = True

    def __init__(self, description: str, retry_after_s: int) -> None:
        super().__init__(description)
        self.retry_after_s = retry_after_s


class WriteNotReplicated(StorageUnavailable):
    """The store made a write but too few replicas confirmed it in time (503): the write
    may still have happened, and may still be lost if the store fails over now.
    ``shortfall`` says what was missing."""

    tells_the_client = True  # what may have happened, and how to retry
    #: The store's replies to the write it made, when the raiser read them (Redis scripts):
    #: a write that must not be lost (a pop's removal) answers them anyway.
    replies: list[Any] | None = None

    def __init__(self, shortfall: str) -> None:
        super().__init__(
            f"The write reached the message store, but {shortfall} ([storage] replica_acks). "
            "It may still have happened: retry it, posting with the same dedup_id so that "
            "the message is stored once."
        )
        self.shortfall = shortfall


class StoreFull(StorageUnavailable):
    """The store refuses new data for lack of memory: a Redis at its ``maxmemory``, which
    evicts nothing (503). A script it refuses has written nothing (Redis refuses one at its
    first write). Reads, claims and deletes still work, and posts work again once messages
    are consumed, deleted or expire."""

    tells_the_client = True

    def __init__(self) -> None:
        super().__init__(
            "The message store is full: it takes no new data until messages are consumed, "
            "deleted or expire. Please try again later."
        )


class StorageConfigError(ZaqarDelayError):
    """The storage URI or options are unusable; raised at startup only."""

    title = "Storage misconfigured"
