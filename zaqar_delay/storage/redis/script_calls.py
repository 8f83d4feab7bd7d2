"""Script calls on a standalone client: each goes straight to a connection of its own pool
(:class:`ScriptConnections`): pack, send, read, one round trip. redis-py's general command path
around that (``Script``, the ``evalsha`` wrapper, the retry closure, its observability hooks,
and a Python pass over every argument before packing) cost about as much CPU as the rest of a
request's storage work together, and a queue operation passes its 21 keys each time.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import hiredis
import redis
from redis.exceptions import NoScriptError

from zaqar_delay.storage.redis.acks import ReplicaAcks
from zaqar_delay.storage.redis.connect import RETRIES_ON_CONNECTION_ERROR
from zaqar_delay.storage.redis.errors import is_transient
from zaqar_delay.storage.redis.readiness import kernel_says_readable
from zaqar_delay.storage.redis.sentinel import on_former_primary, primary_view


class ScriptConnections:
    """The connections script calls run on: the idle ones last in, first out, at most the
    client pool's ``max_connections`` in all, made like the client pool's own.

    redis-py's pool does more on each checkout than a script call needs: a process-id check
    (a system call) on the way out and back, observability counters, a lock-guarded queue and
    a readiness check (another system call); measured in one process on the soak's
    requests, that was about a quarter of a delete's CPU. Here a connection comes back only
    after a whole exchange, its reply read to the end, and any failure closes it, so an idle
    connection holds no unread bytes. One the store closed while it was idle fails its next
    send or read with a ``ConnectionError``, which :class:`PooledScript` retries once on a
    fresh connection.

    When every connection is out, a call waits up to the pool's ``timeout`` (None: as long
    as it takes) for one to come back, then fails with ``ConnectionError``, as redis-py's
    ``BlockingConnectionPool`` does. A forked child starts with none
    (:func:`os.register_at_fork`): the parent's sockets are never shared.
    """

    def __init__(self, pool: redis.ConnectionPool) -> None:
        self._make: Callable[[], Any] = functools.partial(
            pool.connection_class, **pool.connection_kwargs
        )
        self._limit: int = pool.max_connections
        self._timeout: float | None = getattr(pool, "timeout", None)
        # A Sentinel pool's view of the primary: the address its latest connection was told.
        self._sentinel = primary_view(pool)
        # After a failure, when the Sentinels were last asked for the primary (monotonic s).
        self._failed_since_asked = False
        self._asked_at = 0.0
        self._closed = False
        self._start_empty()
        _LIVE.add(self)

    def _start_empty(self) -> None:
        self._idle: list[Any] = []
        self._made = 0
        self._waiting = 0
        self._returned = threading.Condition()

    def checkout(self) -> Any:
        """An idle connection, else a new one while under the limit, else one given back;
        never one the store has closed (or that holds unread bytes), nor one to a primary
        Sentinel no longer names: such a one is closed and the next taken, so a command is
        only sent where it can be answered."""
        if self._failed_since_asked:
            self._ask_for_the_primary()
        while True:
            try:
                connection = self._idle.pop()  # atomic, for threads and greenlets alike
            except IndexError:
                connection = self._make_or_wait()
            if not _has_bytes_waiting(connection) and not self._to_former_primary(connection):
                return connection
            self.discard(connection)

    def _ask_for_the_primary(self) -> None:
        """After a failure, ask the Sentinels which primary they name (at most every
        ``_ASK_EVERY_S``): when it changed, the idle connections to the former one are
        dropped at once, here and in redis-py's pool, instead of each failing in turn."""
        now = time.monotonic()
        if self._sentinel is None or now - self._asked_at < _ASK_EVERY_S:
            return
        self._asked_at = now
        self._failed_since_asked = False
        with contextlib.suppress(redis.RedisError):
            self._sentinel.get_master_address()

    def _to_former_primary(self, connection: Any) -> bool:
        """Whether a Sentinel has named another primary since ``connection`` was made (each
        new connection asks; an idle one to the primary before a failover would otherwise be
        used until the store it reaches stops answering, or answers READONLY)."""
        return connection._sock is not None and on_former_primary(self._sentinel, connection)

    def give_back(self, connection: Any) -> None:
        """Return a connection whose last exchange completed (closed once :meth:`close` ran)."""
        if self._closed:
            self.discard(connection)
            return
        self._idle.append(connection)
        if self._waiting:
            with self._returned:
                self._returned.notify()

    def discard(self, connection: Any) -> None:
        """Close a connection that failed in any way; its place is free again."""
        self._failed_since_asked = True
        connection.disconnect()
        with self._returned:
            self._made -= 1
            self._returned.notify()

    def close(self) -> None:
        """Close the idle connections, and each one still out when it comes back."""
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.disconnect()
        with self._returned:
            self._made -= len(idle)

    def _make_or_wait(self) -> Any:
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        with self._returned:
            while not self._idle and self._made >= self._limit:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise redis.ConnectionError("No connection available.")
                self._waiting += 1
                try:
                    # Bounded, so a connection given back just before this wait (threads
                    # only: greenlets do not switch between the check and the wait) is
                    # seen soon without a lock on every give-back.
                    self._returned.wait(
                        _RECHECK_S if remaining is None else min(remaining, _RECHECK_S)
                    )
                finally:
                    self._waiting -= 1
            if self._idle:
                return self._idle.pop()
            self._made += 1
        try:
            connection = self._make()
            connection.connect()  # the client's own retry policy applies
            return connection
        except BaseException:
            with self._returned:
                self._made -= 1
                self._returned.notify()
            raise

    def _forget_after_fork(self) -> None:
        # The child must not use (nor shut down) the parent's sockets.
        self._start_empty()


def _has_bytes_waiting(connection: Any) -> bool:
    """Whether the kernel holds something to read on an idle connection: an end of stream
    (the store closed it, or died) or bytes out of step. Never a wait, nor a round of
    gevent's hub (``readiness.kernel_says_readable``)."""
    sock = connection._sock
    return sock is not None and kernel_says_readable(sock)  # None: the send connects it


# How often, at most, the Sentinels are asked for the primary while connections fail.
_ASK_EVERY_S = 0.5
# How often a call waiting for a connection looks again without being told.
_RECHECK_S = 0.05
_LIVE: weakref.WeakSet[ScriptConnections] = weakref.WeakSet()


def _forget_all_after_fork() -> None:
    for connections in list(_LIVE):
        connections._forget_after_fork()


os.register_at_fork(after_in_child=_forget_all_after_fork)


class PooledScript:
    """One script run as EVALSHA on a connection of :class:`ScriptConnections`.

    The same contract as redis-py's ``Script`` called on a standalone client: replies come
    back as the client's parser gives them (bytes, integers, nested lists), an error reply
    raises its ``ResponseError`` and an unknown script is loaded and run again.

    A call is sent again on a fresh connection only when sending it failed
    (``RETRIES_ON_CONNECTION_ERROR`` times): the store cannot have run a command it did not
    receive whole. Calls sent together (:meth:`many`) are not: the first may have run. Once
    sent, a lost connection or a timeout is never retried (the script may have run: a post
    run twice would store its messages twice) and the caller answers 503. A connection that
    failed in any way, gevent's timeouts and a killed greenlet included, is closed rather
    than given back.

    With ``acks`` requiring replicas, WAIT follows the script on the same connection, in the
    same packet, and :meth:`ReplicaAcks.check` judges its answer once the script's reply is
    in (``acks.py``).
    """

    def __init__(
        self, connections: ScriptConnections, source: str, acks: ReplicaAcks | None = None
    ) -> None:
        self.connections = connections
        self._source = source.encode()
        self._sha = hashlib.sha1(self._source).hexdigest()
        self._acks = acks if acks is not None and acks.required else None
        self._wait = None if self._acks is None else _pack(*self._acks.wait_args())

    def __call__(self, keys: Sequence[str | bytes], args: Sequence[Any]) -> Any:
        command = _pack("EVALSHA", self._sha, len(keys), *keys, *args)
        try:
            return self._send([command])[0]
        except NoScriptError:
            self._send([_pack("SCRIPT", "LOAD", self._source)], wait=False)
            return self._send([command])[0]

    def many(self, calls: Sequence[tuple[Sequence[str | bytes], Sequence[Any]]]) -> list[Any]:
        """Run the script once for each ``(keys, args)`` of ``calls``, in order, in one round
        trip: the calls go in one packet (then WAIT, as one call's does) and their replies
        come back in order. The first error reply is raised once every reply is read; the
        other calls ran. Redis runs each call whole: each call is atomic, not the set."""
        commands = [_pack("EVALSHA", self._sha, len(keys), *keys, *args) for keys, args in calls]
        replies = self._send(commands, raise_errors=False) if commands else []
        unloaded = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if unloaded:  # only those did not run: the script was not loaded when they came
            self._send([_pack("SCRIPT", "LOAD", self._source)], wait=False)
            again = self._send([commands[i] for i in unloaded], raise_errors=False)
            for index, reply in zip(unloaded, again, strict=True):
                replies[index] = reply
        for reply in replies:
            if isinstance(reply, redis.ResponseError):
                raise reply
        return replies

    def _send(
        self, commands: list[bytes], wait: bool = True, raise_errors: bool = True
    ) -> list[Any]:
        connections = self.connections
        packets = [*commands, self._wait] if wait and self._wait is not None else commands
        # Several calls are never sent again: those before the failure may have run.
        attempts = 1 + RETRIES_ON_CONNECTION_ERROR if len(commands) == 1 else 1
        for attempt in range(1, attempts + 1):
            connection = connections.checkout()  # connects a new one: not retried here
            try:
                connection.send_packed_command(packets, check_health=False)
            except redis.ConnectionError:
                connections.discard(connection)
                if attempt == attempts:
                    raise
                continue
            except BaseException:
                connections.discard(connection)
                raise
            replies, error, confirmed = self._read(connection, len(commands), len(packets))
            if error is not None and raise_errors:
                raise error
            if confirmed is not None and self._acks is not None:
                self._acks.check(confirmed, replies)
            return replies
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _read(
        self, connection: Any, calls: int, replies: int
    ) -> tuple[list[Any], redis.ResponseError | None, Any]:
        """The calls' replies (an error reply in its place, as its ``ResponseError``), the
        first error reply, and WAIT's reply (None when none was sent)."""
        connections = self.connections
        read: list[Any] = []
        error: redis.ResponseError | None = None
        demoted = False
        try:
            for _ in range(calls):
                try:
                    read.append(connection.read_response())
                except redis.ResponseError as exc:
                    # An error reply (NOSCRIPT, a script's error) was read whole: the
                    # connection is still in step.
                    read.append(exc)
                    error = error or exc
            confirmed = None
            if replies > calls:
                try:
                    confirmed = connection.read_response()
                except redis.ResponseError as exc:
                    # WAIT refused: the store is a replica now (a failover demoted it), or
                    # the user may no longer send it (an ACL changed). The calls' own
                    # refusals (MOVED, READONLY) come first; a write it did make is confirmed
                    # by none, and the refusal says why.
                    confirmed, demoted = exc, True
        except BaseException:
            connections.discard(connection)
            raise
        # A connection whose store says "not now" (READONLY: the primary it reached was
        # demoted by a failover) is closed, so the next call connects to the primary of now.
        if demoted or (
            error is not None and any(isinstance(r, Exception) and is_transient(r) for r in read)
        ):
            connections.discard(connection)
        else:
            connections.give_back(connection)
        return read, error, confirmed


def _pack(*args: Any) -> bytes:
    """One command in the Redis protocol (hiredis: str, bytes, int and float arguments)."""
    try:
        packed: bytes = hiredis.pack_command(args)
        return packed
    except TypeError as exc:  # as redis-py reports an argument it cannot send
        raise redis.DataError(str(exc)) from exc


def run_many(
    script: Callable[..., Any], calls: Sequence[tuple[Sequence[str], Sequence[Any]]]
) -> list[Any]:
    """Run ``script`` once for each ``(keys, args)`` of ``calls`` and answer their replies in
    order: in one round trip through a :class:`PooledScript`, one call at a time otherwise (a
    cluster client's script, each call in the slot of its own keys)."""
    if isinstance(script, PooledScript):
        return script.many(calls)
    return [script(keys=keys, args=args) for keys, args in calls]
