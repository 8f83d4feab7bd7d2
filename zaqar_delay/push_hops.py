"""How many pushes of this service a message came through, so that a loop of pushes ends.

A subscription may post its queue's messages to this service's own API (a ``post_data``
template, a ``trust+`` subscriber): queue to queue forwarding, as Zaqar does it. A chain of such
subscriptions that comes back to a queue (the queue itself, or a cycle of queues) would push
and post without end, and one subscription more on the way would double the messages each time
round. So every message keeps its hops (``NewMessage.hops``: 0 when a client posted it), every
push of it carries one more in ``X-Zaqar-Delay-Hops``, and a post carrying that header stores
its messages with that many hops (one more for each message after the first), or is refused
(403) past ``[transport] max_push_hops``. The push that made such a post fails for good, and
the chain ends there.

What one message can still become is bounded, not small: each round multiplies by the
subscriptions of a queue that post back (``[transport] max_subscriptions_per_queue``), for
``max_push_hops`` rounds.

A subscription cannot set the header (``push.headers`` refuses the service's own headers in
``post_headers``). A receiver elsewhere that posts back here without it starts a new chain; it
pays for each round itself.
"""

from __future__ import annotations

from zaqar_delay import errors

HEADER = "X-Zaqar-Delay-Hops"
# The most hops a message keeps (what Redis stores in a byte); [transport] max_push_hops is
# at most this.
MAX_KEPT = 255
# The longest header value read (larger numbers are refused before they are converted).
_MAX_DIGITS = 6


def of_header(value: str | None) -> int:
    """The hops a post's ``X-Zaqar-Delay-Hops`` header gives its messages (0 without one);
    InvalidRequest when it is not a whole number."""
    if value is None:
        return 0
    text = value.strip()
    if not text.isascii() or not text.isdigit() or len(text) > _MAX_DIGITS:
        raise errors.InvalidRequest(
            f"{HEADER} must be a whole number of pushes from 0 (a push of this service sends it)."
        )
    return int(text)


def check(hops: int, most: int) -> None:
    """PushLoopRefused when a post that came through ``hops`` pushes may not be stored
    (``most``: ``[transport] max_push_hops``)."""
    if hops > most:
        raise errors.PushLoopRefused(
            f"This post counts {hops} hops (the pushes of this service it came through, one "
            "after another, and one more for each message after the first); a post may count "
            f"at most {most} ([transport] max_push_hops). A subscription probably posts its "
            "queue's messages back to it, directly or through other queues."
        )


def of_post(hops: int, count: int) -> int:
    """The hops the ``count`` messages of a post that came through ``hops`` pushes keep: one
    more for each message after the first, since a post of several messages multiplies what
    its push carries as several pushes would (a ``post_data`` template posting hundreds of
    copies would otherwise take a loop that far each round). A client's post (0) has none."""
    return hops + count - 1 if hops else 0


def onward(hops: int) -> int:
    """The hops a push of a message with ``hops`` carries, and a dead letter of that push
    keeps."""
    return min(hops + 1, MAX_KEPT)
