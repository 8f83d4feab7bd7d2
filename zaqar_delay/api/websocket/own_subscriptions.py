"""The subscriptions a WebSocket session makes of itself.

A ``subscription_create`` frame without ``subscriber`` subscribes the session: the HTTP route
is asked to subscribe this process's relay address for the session (``relay.py``), named in
the request's environ, where a client cannot put it. Pushes then reach the session as
notification frames at each message's due time, from whichever server process owes them, with
the push path's retries. When the session ends, its subscriptions are deleted (Zaqar's
behaviour) with the server's own authority, as the route that made them left it: the token
the session subscribed with may have expired by then (a keystone session is closed when its
token expires), and a pre-signed URL may allow no delete. The relay forgets the session. A
subscription made through a pre-signed URL is deleted when the URL expires, the session
open or not: what the signature allowed ends with it, unless the session subscribed again
with an authority that lasts longer (its token, or a URL expiring later). Subscribing again
to the same queue finds the same subscription: the session keeps one entry for it, however
many times it asks.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from zaqar_delay import jsondoc, signed_urls
from zaqar_delay.api.websocket.relay import (
    SESSION_SUBSCRIBER_ENV,
    Deliver,
    SessionRelay,
    SessionSubscriber,
)
from zaqar_delay.clock import Clock

if TYPE_CHECKING:
    from zaqar_delay.api.websocket.frames import Frames

LOG = logging.getLogger(__name__)


class OwnSubscriptions:
    """A session's subscriptions of itself, made through ``relay`` (None: this server makes
    none)."""

    def __init__(self, relay: SessionRelay | None, clock: Clock) -> None:
        """``clock``: the one pre-signed URLs are checked against (the service's)."""
        self._relay = relay
        self._clock = clock
        self._id = secrets.token_hex(16)
        self._secret = secrets.token_urlsafe(32)  # the key the relay checks its pushes by
        # By subscription id: when its authority lapses (epoch seconds: a pre-signed URL's
        # expiry; None: with the session), and how to delete it.
        self._forgets: dict[str, tuple[float | None, Callable[[], None]]] = {}
        #: Hands a push's body to the session as a notification frame; False once it cannot.
        self.deliver: Deliver | None = None

    def subscribe(
        self, frames: Frames, headers: Mapping[str, str], path: str, body: Mapping[str, Any]
    ) -> tuple[int, Any]:
        """Subscribe the session by the subscriptions route ``path`` of a queue or topic
        (with the frame's ``ttl`` and ``options``): the route's status and answer."""
        if self._relay is None or self.deliver is None:
            return 400, {
                "title": "Invalid API request",
                "description": "This server subscribes no WebSocket session: name a subscriber.",
            }
        address = self._relay.subscriber(self._id, self.deliver, self._secret)
        subscriber = SessionSubscriber(address, self._secret)
        sent = {name: body[name] for name in ("ttl", "options") if name in body}
        status, _, answer = frames.call(
            "POST",
            path,
            headers,
            data=jsondoc.dumps(sent).encode(),
            environ={SESSION_SUBSCRIBER_ENV: subscriber},
        )
        lapses = signed_urls.expiry_of(headers)
        for subscription_id, forget in subscriber.forgets.items():
            known = self._forgets.get(subscription_id)
            held_until = lapses if known is None else _later(known[0], lapses)
            self._forgets[subscription_id] = (held_until, forget)
        return status, answer

    def held(self) -> int:
        """How many subscriptions of itself the session holds."""
        return len(self._forgets)

    def seconds_to_lapse(self) -> float | None:
        """Seconds until a subscription's pre-signed URL expires (None: none was made so)."""
        first = min((at for at, _ in self._forgets.values() if at is not None), default=None)
        return None if first is None else first - self._clock.now_ms() / 1000

    def lapse(self) -> None:
        """Delete the subscriptions whose pre-signed URL has expired."""
        now_s = self._clock.now_ms() / 1000
        lapsed = [sid for sid, (at, _) in self._forgets.items() if at is not None and at <= now_s]
        if lapsed:
            _delete([self._forgets.pop(sid)[1] for sid in lapsed])

    def end(self) -> None:
        """Delete the session's subscriptions of itself; the relay forgets it."""
        if self._relay is not None:
            self._relay.forget(self._id)
        forgets, self._forgets = self._forgets, {}
        _delete([forget for _, forget in forgets.values()])


def _later(first: float | None, second: float | None) -> float | None:
    """The later of two lapse times (None: never, with the session)."""
    return None if first is None or second is None else max(first, second)


def _delete(forgets: list[Callable[[], None]]) -> None:
    """Delete subscriptions; one the store cannot delete now is logged and ends with its ttl
    (its pushes find no session)."""
    for forget in forgets:
        try:
            forget()
        except Exception:  # the next ones are still deleted
            LOG.warning("A WebSocket session's subscription was not deleted", exc_info=True)
