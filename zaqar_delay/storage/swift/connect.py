"""Swift connections: authentication (tempauth v1.0 or Keystone v3) and the few object and
container requests the driver makes, with every failure turned into StorageUnavailable.

python-swiftclient's ``Connection`` is not safe to share between threads, so each thread (and
each gevent greenlet's thread) gets its own, all built from one :class:`SwiftAccess`.
"""

from __future__ import annotations

import dataclasses
import io
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import requests
import swiftclient
from keystoneauth1.exceptions import ClientException as KeystoneError
from swiftclient.exceptions import ClientException

from zaqar_delay import errors
from zaqar_delay.storage.bounds import SWIFT_METADATA_CACHE_MS, SWIFT_SETTLE_MS
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.timing import REQUEST_ATTEMPTS, SwiftTimes

T = TypeVar("T")
R = TypeVar("R")

SCHEMES = ("swift",)
# Names one listing request returns at most (Swift's default container_listing_limit).
LISTING_LIMIT = 10_000
# Requests a driver runs at once for one call (a post's objects, a claim's messages).
PARALLEL_REQUESTS = 16
# The names of the threads that make a driver's requests in parallel.
POOL_THREADS = "zd-swift"
# Times a delete is sent while newer writes of its object overtake it, and the
# pauses before sending it again (doubling up to the longest): about 2 s in all, enough for
# the timestamp of an update from a proxy whose clock is ahead of this one's to pass.
OVERTAKEN_ATTEMPTS = 10
OVERTAKEN_PAUSE_S = (0.01, 0.5)


@dataclasses.dataclass(frozen=True)
class SwiftAccess:
    """Who the driver is to Swift and where to find it.

    ``auth_url`` ending in ``/auth/v1.0`` (or ``/v1.0``) is tempauth: ``user`` is
    ``account:user``. Anything else is Keystone v3: ``user`` and ``project`` are names in
    their domains."""

    auth_url: str
    user: str
    password: str
    project: str
    insecure: bool = False
    user_domain: str = "Default"
    project_domain: str = "Default"
    user_domain_id: str | None = None
    project_domain_id: str | None = None
    region_name: str | None = None
    interface: str = "public"
    timeout: float = 10.0
    # See SwiftClient.create_settled and RecentQueueObjects.
    settle_ms: int = SWIFT_SETTLE_MS
    metadata_cache_ms: int = SWIFT_METADATA_CACHE_MS

    def times(self) -> SwiftTimes:
        """The driver's time bounds with this access's settle, cache and request timeout."""
        return SwiftTimes(self.settle_ms, self.metadata_cache_ms, int(self.timeout * 1000))

    @property
    def tempauth(self) -> bool:
        return self.auth_url.rstrip("/").endswith("v1.0")

    def connection(self) -> swiftclient.Connection:
        """A new connection; it authenticates on its first request and again when its token
        is refused (one retry, at once)."""
        common: dict[str, Any] = {
            "retries": REQUEST_ATTEMPTS - 1,
            "starting_backoff": 0.01,
            "max_backoff": 0.05,
            "timeout": self.timeout,
            "insecure": self.insecure,
        }
        if self.tempauth:
            return swiftclient.Connection(
                authurl=self.auth_url, user=self.user, key=self.password, auth_version="1", **common
            )
        from keystoneauth1 import session as ks_session
        from keystoneauth1.identity import v3

        auth = v3.Password(
            auth_url=self.auth_url,
            username=self.user,
            password=self.password,
            project_name=self.project,
            user_domain_id=self.user_domain_id,
            user_domain_name=None if self.user_domain_id else self.user_domain,
            project_domain_id=self.project_domain_id,
            project_domain_name=None if self.project_domain_id else self.project_domain,
        )
        session = ks_session.Session(auth=auth, verify=not self.insecure, timeout=self.timeout)
        options = {"endpoint_type": self.interface, "region_name": self.region_name}
        return swiftclient.Connection(session=session, os_options=options, **common)


# What a swift:// URI's query may set, overriding [drivers:message_store:swift]: a pool can
# name a Swift cluster of its own.
URI_OPTIONS: dict[str, Callable[[str], Any]] = {
    "auth_url": str,
    "settle_ms": int,
    "metadata_cache_ms": int,
    "insecure": lambda text: text.lower() in ("1", "true", "yes", "on"),
    "user_domain_name": str,
    "user_domain_id": str,
    "project_domain_name": str,
    "project_domain_id": str,
    "region_name": str,
    "interface": str,
}
_FIELDS = {"user_domain_name": "user_domain", "project_domain_name": "project_domain"}


def access_from_uri(uri: str, **options: Any) -> SwiftAccess:
    """The access a ``swift://USER:PASSWORD@/PROJECT`` URI names (user and password
    percent-encoded: ``test%3Atester`` for tempauth's ``test:tester``). ``options`` are the
    configured defaults; the URI's query may override any of ``URI_OPTIONS``."""
    try:
        parts = urllib.parse.urlsplit(uri)
        user, password = parts.username, parts.password
        query = urllib.parse.parse_qs(parts.query, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise errors.StorageConfigError(f"Invalid storage URI: {exc}") from exc
    if parts.scheme not in SCHEMES or not user or password is None:
        raise errors.StorageConfigError(
            "Invalid Swift storage URI: use swift://USER:PASSWORD@/PROJECT, the user "
            "percent-encoded (swift://test%3Atester:testing@/test for tempauth)"
        )
    unknown = sorted(set(query) - set(URI_OPTIONS))
    if unknown:
        raise errors.StorageConfigError(
            f"Invalid Swift storage URI: unknown option {unknown[0]!r} (known: "
            f"{', '.join(URI_OPTIONS)})"
        )
    settings = {key: value for key, value in options.items() if value is not None}
    for key, values in query.items():
        try:
            settings[_FIELDS.get(key, key)] = URI_OPTIONS[key](values[-1])
        except ValueError as exc:
            raise errors.StorageConfigError(
                f"Invalid Swift storage URI: {key} = {values[-1]!r}: {exc}"
            ) from exc
    if not settings.get("auth_url"):
        raise errors.StorageConfigError(
            "A swift:// storage URI needs [drivers:message_store:swift] auth_url (Keystone v3, "
            "or a tempauth URL ending in /auth/v1.0)"
        )
    return SwiftAccess(
        user=urllib.parse.unquote(user),
        password=urllib.parse.unquote(password),
        project=urllib.parse.unquote(parts.path.lstrip("/")),
        **settings,
    )


# Set in the pool's threads (greenlets under gevent), so nested calls can tell.
_POOL_THREAD = threading.local()


def _mark_pool_thread() -> None:
    _POOL_THREAD.marked = True


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
        self._pool = ThreadPoolExecutor(
            parallel, thread_name_prefix=POOL_THREADS, initializer=_mark_pool_thread
        )

    @property
    def access(self) -> SwiftAccess:
        return self._access

    def _connection(self) -> swiftclient.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._access.connection()
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
        try:
            self._write(container, name, body, content_type, dict(headers or {}))
        except ClientException as exc:
            raise _unavailable(exc) from exc

    def _write(
        self, container: str, name: str, body: bytes, content_type: str, headers: dict[str, str]
    ) -> None:
        """PUT the object; sent a second time only after Swift refused the token."""
        answer: dict[str, Any] = {}
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

    def create(
        self,
        container: str,
        name: str,
        body: bytes,
        content_type: str,
        headers: Mapping[str, str] | None = None,
    ) -> bool:
        """Store the object only if no object has that name (``If-None-Match: *``); False
        when one has."""
        try:
            self._write(
                container, name, body, content_type, {**(headers or {}), "If-None-Match": "*"}
            )
        except ClientException as exc:
            if exc.http_status == 412:
                return False
            raise _unavailable(exc) from exc
        return True

    def create_settled(
        self,
        container: str,
        name: str,
        body: bytes,
        content_type: str,
        headers: Mapping[str, str] | None = None,
    ) -> bool:
        """Create the object only if absent, and say whether this call's ``body`` (which must
        be unique to the call) is the one Swift keeps.

        ``If-None-Match: *`` alone does not make one creator win: an object server checks
        that the object is absent before it receives the data, so concurrent creations all
        pass the check and all succeed, and the one with the latest timestamp is kept. Any
        creation that can still overwrite this one passed its check before this one was
        committed; once they are committed too, every creator reads the same winner
        (``X-Newest``: from every replica). :meth:`settled` says how long that is assumed to
        take."""
        sent = time.monotonic()
        if not self.create(container, name, body, content_type, headers):
            return False
        return self.settled(container, name, sent) == body

    def settled(self, container: str, name: str, sent: float) -> bytes | None:
        """The body Swift keeps of an object just created with :meth:`create`, whose request
        was sent at ``sent`` (``time.monotonic()``), once every creation that could overwrite
        it is committed (see :meth:`create_settled`); None when it is gone.

        The wait is ``settle_ms`` plus this creation's own round trip. The assumption: a
        concurrent creation is committed within that long after its object server checked
        that the object was absent. ``settle_ms`` alone would assume object servers answer
        in a bounded time; a loaded cluster (or machine) slows every creation alike, and the
        round trip this creation took is the measure of that load: waiting it again keeps
        the margin where every commit is slow."""
        round_trip = time.monotonic() - sent
        time.sleep(self._access.settle_ms / 1000 + round_trip)
        found = self.get(container, name, newest=True)
        return None if found is None else found[1]

    def get(
        self, container: str, name: str, *, newest: bool = False
    ) -> tuple[dict[str, str], bytes] | None:
        """``(headers, body)``, or None when there is no such object. ``newest``: the newest
        copy among the replicas, not the first one to answer."""
        try:
            headers, body = self._call(
                "get_object", container, name, headers={"X-Newest": "true"} if newest else None
            )
        except ClientException as exc:
            if exc.http_status == 404:
                return None
            raise _unavailable(exc) from exc
        return headers, body

    def latest_numbered(
        self, container: str, prefix: str, listed: list[dict[str, Any]] | None = None
    ) -> tuple[int, bytes | None]:
        """The highest-numbered object ``<prefix><n>`` (numbers as ``names.number_part``) and
        its body, read from every replica: ``(0, None)`` when there is none. A listing may
        not show the newest yet, so the numbers after the highest listed are read until one
        is missing: an object once created is always found. ``listed``: the prefix's
        listing (or its last entry), when the caller has it."""

        def read(number: int) -> bytes | None:
            found = self.get(container, prefix + names.number_part(number), newest=True)
            return None if found is None else found[1]

        if listed is None:
            # The highest name alone, however many there are (a listing page in name order
            # would stop at the 10,000th).
            listed = self.listing(container, prefix, limit=1, reverse=True)
        highest = int(listed[-1]["name"].rsplit("/", 1)[1]) if listed else 0
        # The highest listed and the one after it are read together.
        after = self.submit(read, highest + 1)
        body = read(highest) if highest else None
        newer = after.result()
        while newer is not None:
            highest, body = highest + 1, newer
            newer = read(highest + 1)
        return highest, body

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
        """Delete the object; one already gone is not an error.

        A delete that a concurrent write overtook (409: an object server orders an object's
        updates by their proxy timestamps, and refuses a delete older than the data it has)
        is sent again, with a newer timestamp, so it applies after that write: the order the
        two would have had had this one arrived later, which proxies on other clocks can give
        anyway, so no caller relies on the order of concurrent updates. The pauses between
        sends let the timestamp of a write from a proxy whose clock is ahead pass."""
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

    @staticmethod
    def _in_pool() -> bool:
        return getattr(_POOL_THREAD, "marked", False)

    def submit(self, function: Callable[..., R], *args: Any) -> Future[R]:
        """``function(*args)`` on the pool's threads (at once, from a pool thread)."""
        if self._in_pool():
            done: Future[R] = Future()
            try:
                done.set_result(function(*args))
            except Exception as exc:  # noqa: BLE001 - handed over with the future
                done.set_exception(exc)
            return done
        return self._pool.submit(function, *args)

    def each(self, function: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """``function`` over ``items`` on the pool's threads, results in order; the first
        failure is raised once every call has ended."""
        batch = list(items)
        if len(batch) <= 1 or self._in_pool():
            # Called from the pool itself: waiting there for more of its threads could wait
            # forever once they are all busy, so nested calls run one after another.
            return [function(item) for item in batch]
        futures = [self._pool.submit(function, item) for item in batch]
        results: list[R] = []
        failure: BaseException | None = None
        for future in futures:
            try:
                results.append(future.result())
            except BaseException as exc:  # noqa: BLE001 - the first is raised below
                failure = failure or exc
        if failure is not None:
            raise failure
        return results

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        with self._lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()
