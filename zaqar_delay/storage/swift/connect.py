"""The one module of the driver that speaks Swift: the few object and container requests the
driver makes (settled create-only writes, numbered generations, bounded listings,
content-type updates, overtaken deletes sent again), on connections its access authenticates
(``access.py``: tempauth v1.0 or Keystone v3), with every failure turned into
StorageUnavailable.

python-swiftclient's ``Connection`` is not safe to share between threads, so each thread (and
each gevent greenlet's thread) gets its own, all built from one :class:`SwiftAccess`.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from typing import Any, TypeVar

import requests
import swiftclient
from keystoneauth1.exceptions import ClientException as KeystoneError
from swiftclient.exceptions import ClientException

from zaqar_delay import errors
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.access import SwiftAccess
from zaqar_delay.storage.swift.parallel import PARALLEL_REQUESTS, Parallel

T = TypeVar("T")
R = TypeVar("R")

# Names one listing request returns at most (Swift's default container_listing_limit).
LISTING_LIMIT = 10_000
# Times a delete is sent while newer writes of its object overtake it, and the
# pauses before sending it again (doubling up to the longest): about 2 s in all, enough for
# the timestamp of an update from a proxy whose clock is ahead of this one's to pass.
OVERTAKEN_ATTEMPTS = 10
OVERTAKEN_PAUSE_S = (0.01, 0.5)
# Reads of an object known to exist before a 404 is believed, and the pause between them: a
# GET that races an overwrite of the object may answer 404 (its object server chose the file
# the overwrite then removed), about once in 150 such GETs on the all-in-one.
KNOWN_OBJECT_READS = 3
KNOWN_OBJECT_PAUSE_S = 0.01


def _unavailable(exc: Exception) -> errors.StorageUnavailable:
    return errors.StorageUnavailable(f"Swift is unavailable: {exc}")


class _WriteBody(io.BytesIO):
    """The body of one PUT, as python-swiftclient reads it: sent again only after Swift
    refused the connection's token, once swiftclient has authenticated again (it clears the
    token first, then rewinds the body). After any other failure the write may have been
    applied: sent again, a create-only write would find its own object and answer that
    another call created it. That failure is reported instead, with Swift's answer when
    there was one (swiftclient could only say that the body could not be sent again)."""

    def __init__(self, data: bytes, connection: swiftclient.Connection, answer: dict[str, Any]):
        """``answer``: the ``response_dict`` the request fills in."""
        super().__init__(data)
        self._connection = connection
        self._answer = answer

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if self._connection.token is not None:
            status = self._answer.get("status")
            if status is None:
                raise ClientException("the write got no answer from Swift")
            reason = self._answer.get("reason", "")
            raise ClientException(f"Swift answered {status} {reason}", http_status=status)
        return super().seek(offset, whence)


class ConcurrentUpdate(Exception):
    """Swift refused an update of an object another update overtook (409 Conflict)."""


class SwiftClient:
    """The requests the driver makes, one connection per thread.

    Answers the driver expects (a 404 on a read or delete, a 412 on a create-only write)
    are return values; anything else Swift refuses, and every connection failure, raises
    StorageUnavailable."""

    def __init__(self, access: SwiftAccess, parallel: int = PARALLEL_REQUESTS) -> None:
        self._access = access
        self._local = threading.local()
        self._connections: list[swiftclient.Connection] = []
        self._lock = threading.Lock()
        self._parallel = Parallel(parallel)

    @property
    def access(self) -> SwiftAccess:
        return self._access

    def _new_connection(self) -> swiftclient.Connection:
        """A connection for one thread (a test's client may make it otherwise)."""
        return self._access.connect()

    def _connection(self) -> swiftclient.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._new_connection()
            self._local.connection = connection
            with self._lock:
                self._connections.append(connection)
        return connection

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self._connection(), method)(*args, **kwargs)
        except ClientException:
            raise
        except (requests.RequestException, OSError, KeystoneError) as exc:
            # Keystone unreachable, or refusing the credentials: no request can be made.
            raise _unavailable(exc) from exc

    def put_container(self, container: str) -> None:
        try:
            self._call("put_container", container)
        except ClientException as exc:
            raise _unavailable(exc) from exc

    def put(
        self,
        container: str,
        name: str,
        body: bytes,
        content_type: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Store the object, replacing any: a blind overwrite. One older than the object's
        latest update (proxy timestamps; a concurrent update overtook it) is accepted (202)
        and not kept: as if it had come first and been overwritten."""
        self._write(container, name, body, content_type, dict(headers or {}))

    def _write(
        self, container: str, name: str, body: bytes, content_type: str, headers: dict[str, str]
    ) -> bool:
        """PUT the object; sent a second time only after Swift refused the token. False when
        Swift answered 412 (a create-only write found an object)."""
        answer: dict[str, Any] = {}
        try:
            self._call(
                "put_object",
                container,
                name,
                _WriteBody(body, self._connection(), answer),
                content_length=len(body),
                content_type=content_type,
                headers=headers,
                response_dict=answer,
            )
        except ClientException as exc:
            if exc.http_status == 412:
                return False
            raise _unavailable(exc) from exc
        return True

    def create(
        self,
        container: str,
        name: str,
        body: bytes,
        content_type: str,
        headers: Mapping[str, str] | None = None,
        *,
        read_first: bool = False,
    ) -> bool:
        """Store the object only if no object has that name (``If-None-Match: *``); False
        when one has. ``read_first``: create it only if a read (HEAD) first finds none. A
        request racing a replacement of the object (a blind overwrite, or a POST after a
        POST; design.rst) may find no file, and a create-only write would store over it; a
        read and the creation after it both miss it only if two replacements come that close."""
        if read_first and self.exists(container, name):
            return False
        create_only = {**(headers or {}), "If-None-Match": "*"}
        return self._write(container, name, body, content_type, create_only)

    def create_settled(
        self,
        container: str,
        name: str,
        body: bytes,
        content_type: str,
        headers: Mapping[str, str] | None = None,
        *,
        read_first: bool = False,
    ) -> bool:
        """Create the object only if absent (``read_first``: as :meth:`create`); whether this
        call's ``body`` (unique to the call, or one any caller sending it may own) is kept.

        ``If-None-Match: *`` alone does not make one creator win: an object server checks
        that the object is absent before it receives the data, so concurrent creations all
        pass the check and all succeed, and the one with the latest timestamp is kept. Any
        creation that can still overwrite this one passed its check before this one was
        committed; once they are committed too, every creator reads the same winner
        (``X-Newest``: from every replica). :meth:`settled` says how long that takes."""
        sent = time.monotonic()
        if not self.create(container, name, body, content_type, headers, read_first=read_first):
            return False
        return self.settled(container, name, sent) == body

    def settled(self, container: str, name: str, sent: float) -> bytes | None:
        """The body Swift keeps of an object just created with :meth:`create`, whose request
        was sent at ``sent`` (``time.monotonic()``), once every creation that could overwrite
        it is committed (see :meth:`create_settled`); None when it is gone.

        The wait is ``settle_ms`` plus this creation's own round trip, the assumption being
        that a concurrent creation is committed within that long after its object server
        checked that the object was absent. ``settle_ms`` alone would assume object servers
        answer in a bounded time; a loaded cluster (or machine) slows every creation alike,
        and waiting this creation's round trip again keeps the margin when all are slow."""
        round_trip = time.monotonic() - sent
        time.sleep(self._access.settle_ms / 1000 + round_trip)
        found = self.get(container, name, newest=True, known=True)
        return None if found is None else found[1]

    def get(
        self, container: str, name: str, *, newest: bool = False, known: bool = False
    ) -> tuple[dict[str, str], bytes] | None:
        """``(headers, body)``, or None when there is no such object. ``newest``: the newest
        copy among the replicas, not the first one to answer. ``known``: the object is known
        to have been created (this process created it, read it, or listed it), or a caller
        acts on its absence where it usually exists (a queue's metadata), so a 404 is read
        again, up to ``KNOWN_OBJECT_READS`` reads, before it is believed: one GET that races
        an overwrite may answer 404, and a caller would take the object for deleted."""
        headers = {"X-Newest": "true"} if newest else None
        for attempt in range(KNOWN_OBJECT_READS if known else 1):
            if attempt:
                time.sleep(KNOWN_OBJECT_PAUSE_S)
            try:
                found: tuple[dict[str, str], bytes] = self._call(
                    "get_object", container, name, headers=headers
                )
                return found
            except ClientException as exc:
                if exc.http_status != 404:
                    raise _unavailable(exc) from exc
        return None

    def latest_numbered(
        self, container: str, prefix: str, listed: list[dict[str, Any]] | None = None
    ) -> tuple[int, tuple[dict[str, str], bytes] | None]:
        """The highest-numbered object ``<prefix><n>`` (numbers as ``names.number_part``) and
        its headers and body, read from every replica: ``(0, None)`` when there is none. A
        listing may not show the newest yet, so the numbers after the highest listed are read
        until one is missing: an object once created is always found. ``listed``: the
        prefix's listing (or its last entry), when the caller has it."""

        def read(number: int, known: bool = False) -> tuple[dict[str, str], bytes] | None:
            return self.get(container, prefix + names.number_part(number), newest=True, known=known)

        if listed is None:
            # The highest name alone, however many there are (a listing page in name order
            # would stop at the 10,000th).
            listed = self.listing(container, prefix, limit=1, reverse=True)
        highest = int(listed[-1]["name"][len(prefix) :]) if listed else 0
        # The highest listed and the one after it are read together.
        after = self.submit(read, highest + 1)
        found = read(highest, known=True) if highest else None
        newer = after.result()
        while newer is not None:
            highest, found = highest + 1, newer
            newer = read(highest + 1)
        return highest, found

    def exists(self, container: str, name: str) -> bool:
        return self.head(container, name) is not None

    def head(self, container: str, name: str) -> dict[str, str] | None:
        """The object's headers (names in lower case), or None when there is no such object."""
        try:
            return dict(self._call("head_object", container, name))
        except ClientException as exc:
            if exc.http_status == 404:
                return None
            raise _unavailable(exc) from exc

    def set_user_metadata(self, container: str, name: str, headers: Mapping[str, str]) -> None:
        """Replace the object's ``X-Object-Meta-*`` headers with ``headers`` (a POST: its
        body and content type are kept); nothing when there is no such object. Raises
        :class:`ConcurrentUpdate` when the object changed at the same moment: Swift orders an
        object's updates by timestamp and refuses one older than what it has (409)."""
        self._post(container, name, dict(headers))

    def set_content_type(
        self, container: str, name: str, content_type: str, headers: Mapping[str, str]
    ) -> None:
        """Give the object a new content type, which its container listing shows at once, and
        ``headers`` (a POST: the body is kept; user metadata and ``X-Delete-At`` not in
        ``headers`` are removed); as :meth:`set_user_metadata` otherwise."""
        self._post(container, name, {**headers, "Content-Type": content_type})

    def _post(self, container: str, name: str, headers: dict[str, str]) -> None:
        try:
            self._call("post_object", container, name, headers)
        except ClientException as exc:
            if exc.http_status == 409:
                raise ConcurrentUpdate(f"{container}/{name}") from exc
            if exc.http_status != 404:
                raise _unavailable(exc) from exc

    def delete(self, container: str, name: str) -> None:
        """Delete the object; one already gone is not an error. A delete that a concurrent
        write overtook (409: an object server orders an object's updates by their proxy
        timestamps, and refuses a delete older than the data it has) is sent again, with a
        newer timestamp, so it applies after that write: the order the two would have had had
        this one arrived later, which proxies on other clocks can give anyway, so no caller
        relies on the order of concurrent updates. The pauses between sends let the
        timestamp of a write from a proxy whose clock is ahead pass."""
        pause, longest = OVERTAKEN_PAUSE_S
        for attempt in range(OVERTAKEN_ATTEMPTS):
            try:
                self._call("delete_object", container, name)
                return
            except ClientException as exc:
                if exc.http_status == 404:
                    return
                if exc.http_status != 409:
                    raise _unavailable(exc) from exc
            if attempt + 1 < OVERTAKEN_ATTEMPTS:
                time.sleep(min(pause * 2**attempt, longest))
        raise errors.StorageUnavailable(f"Swift object {container}/{name} kept being rewritten")

    def listing(
        self,
        container: str,
        prefix: str,
        *,
        marker: str = "",
        end_marker: str = "",
        limit: int = LISTING_LIMIT,
        reverse: bool = False,
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` objects named after ``marker`` and before ``end_marker``, with
        ``prefix``, in name order (``name``, ``content_type``, ``bytes``...); ``reverse``:
        from the last name back (without markers)."""
        try:
            _, found = self._call(
                "get_container",
                container,
                prefix=prefix,
                marker=marker,
                end_marker=end_marker,
                limit=min(limit, LISTING_LIMIT),
                query_string="reverse=on" if reverse else None,
            )
        except ClientException as exc:
            raise _unavailable(exc) from exc
        return list(found)

    def walk(
        self,
        container: str,
        prefix: str,
        *,
        marker: str = "",
        end_marker: str = "",
        page: int = LISTING_LIMIT,
    ) -> Iterator[dict[str, Any]]:
        """Every object :meth:`listing` would name, one listing request per ``page`` (at most
        10,000): a smaller page for a caller that may stop early."""
        page = min(page, LISTING_LIMIT)
        while True:
            found = self.listing(
                container, prefix, marker=marker, end_marker=end_marker, limit=page
            )
            yield from found
            if len(found) < page:
                return
            marker = found[-1]["name"]

    def delete_all(self, container: str, *prefixes: str) -> None:
        """Delete every object named with one of ``prefixes``, in parallel."""
        found = [entry["name"] for prefix in prefixes for entry in self.walk(container, prefix)]
        self.each(lambda name: self.delete(container, name), found)

    def ping(self) -> bool:
        try:
            self._call("head_account")
        except (ClientException, errors.StorageUnavailable):
            return False
        return True

    def submit(self, function: Callable[..., R], *args: Any) -> Future[R]:
        """``function(*args)`` on the client's request threads (``Parallel.submit``)."""
        return self._parallel.submit(function, *args)

    def each(self, function: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """``function`` over ``items`` on the request threads (``Parallel.each``)."""
        return self._parallel.each(function, items)

    def close(self) -> None:
        self._parallel.close()
        with self._lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()
