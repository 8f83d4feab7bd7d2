"""The subscriptions a WebSocket session makes of itself.

A ``subscription_create`` frame without ``subscriber`` subscribes the session: the HTTP route
is asked to subscribe this process's relay address for the session (``relay.py``), named in
the request's environ, where a client cannot put it. Pushes then reach the session as
notification frames at each message's due time, from whichever server process owes them, with
the push path's retries. When the session ends, its subscriptions are deleted (Zaqar's
behaviour) and the relay forgets it.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from zaqar_delay import jsondoc
from zaqar_delay.api.websocket.relay import SESSION_SUBSCRIBER_ENV, Deliver, SessionRelay

if TYPE_CHECKING:
    from zaqar_delay.api.websocket.frames import Frames


class OwnSubscriptions:
    """A session's subscriptions of itself, made through ``relay`` (None: this server makes
    none)."""

    def __init__(self, relay: SessionRelay | None) -> None:
        self._relay = relay
        self._id = secrets.token_hex(16)
        self._made: list[tuple[Mapping[str, str], str]] = []
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
        subscriber = self._relay.subscriber(self._id, self.deliver)
        sent = {name: body[name] for name in ("ttl", "options") if name in body}
        status, _, answer = frames.call(
            "POST",
            path,
            headers,
            data=jsondoc.dumps(sent).encode(),
            environ={SESSION_SUBSCRIBER_ENV: subscriber},
        )
        if status == 201 and isinstance(answer, dict):
            self._made.append((dict(headers), f"{path}/{answer['subscription_id']}"))
        return status, answer

    def end(self, frames: Frames) -> None:
        """Delete the session's subscriptions of itself; the relay forgets it."""
        if self._relay is not None:
            self._relay.forget(self._id)
        for headers, subscription in self._made:
            frames.call("DELETE", subscription, headers)
        self._made.clear()
