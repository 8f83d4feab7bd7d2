"""Wake-ups for waiting claims over Redis pub/sub.

Scripts publish on a queue's wake channel only while its ``waiters`` key exists, so queues
nobody waits on pay one EXISTS per write. A server process holds one pattern subscription for
every queue and dispatches wake-ups to its local waiters.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import redis

from zaqar_delay.storage.redis.errors import translate_errors
from zaqar_delay.storage.redis.keys import KeySpace
from zaqar_delay.storage.redis.sentinel import on_former_primary, primary_view
from zaqar_delay.storage.traits import OnReconnect, OnWake, Wakeups

LOG = logging.getLogger(__name__)

# How long a listener waits for a message before it checks whether it should stop.
POLL_S = 1.0


class RedisWakeups(Wakeups):
    def __init__(self, client: Any, keys: KeySpace, closed: threading.Event) -> None:
        self._client = client
        self._keys = keys
        self._closed = closed
        # A Sentinel pool's view of the primary (None for any other client).
        self._sentinel = (
            primary_view(client.connection_pool) if isinstance(client, redis.Redis) else None
        )

    def channel(self, project: str, queue: str) -> str:
        return self._keys.queue(project, queue).wake

    @translate_errors
    def announce(self, project: str, queue: str, ttl_ms: int) -> None:
        self._client.set(self._keys.queue(project, queue).waiters, 1, px=ttl_ms)

    def listen(self, on_wake: OnWake, on_reconnect: OnReconnect, stop: threading.Event) -> None:
        """Hear wake-ups until ``stop``, subscribing again after any failure. A subscription
        the store's ACL refuses is logged once, as an error naming the grant it needs; it is
        tried again each second meanwhile, and waiting claims look again at each try."""
        pattern = self._keys.wake_pattern()
        refusal_logged = False

        def stopped() -> bool:
            return stop.is_set() or self._closed.is_set()

        while not stopped():
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.psubscribe(pattern)
                on_reconnect()
                self._hear(pubsub, on_wake, stopped)
            except redis.exceptions.NoPermissionError as exc:
                if not refusal_logged:
                    LOG.error(
                        "the Redis user may not subscribe to %s (%s): waiting claims look for "
                        "messages once a second instead of as they are posted; grant it with "
                        "ACL SETUSER <user> &%s",
                        pattern,
                        exc,
                        pattern,
                    )
                    refusal_logged = True
                stop.wait(POLL_S)
            except (redis.RedisError, OSError, ValueError, TypeError) as exc:
                # ValueError/OSError/TypeError: the client's sockets were closed under the
                # listener (redis-py 8's hiredis parser polls a socket that is already None).
                if not stopped():
                    LOG.warning("wake-up subscription lost (%s); reconnecting", exc)
                stop.wait(POLL_S)
            finally:
                pubsub.close()

    def _hear(self, pubsub: Any, on_wake: OnWake, stopped: Callable[[], bool]) -> None:
        """Pass on the wake-ups ``pubsub`` hears until ``stopped()``; raises when the
        subscription is gone or reaches a former primary."""
        while not stopped():
            if pubsub.connection is None or not pubsub.subscribed:
                # get_message() returns at once without a connection: reconnect.
                raise redis.ConnectionError("wake-up subscription closed")
            # Scripts publish wake-ups on the primary: a subscription left on a former one
            # (cut off by a partition, or demoted when it healed) would hear none. Each new
            # connection of this process updates the view, so this costs no call.
            if on_former_primary(self._sentinel, pubsub.connection):
                raise redis.ConnectionError("wake-up subscription on a former primary")
            message = pubsub.get_message(timeout=POLL_S)
            if message is not None and message["type"] == "pmessage":
                on_wake(message["channel"].decode())
