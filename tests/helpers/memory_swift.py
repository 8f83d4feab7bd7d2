"""Swift's object API in memory, for model-based tests of the Swift driver.

``MemorySwift`` keeps every container's objects with their history, and answers the requests
``SwiftClient`` makes as python-swiftclient's ``Connection`` would: create-only writes
(``If-None-Match: *``, 412), blind overwrites, POST updates of content type and metadata,
deletes, listings in name order with markers, and 404s. The real ``SwiftClient`` runs on top
(``MemoryClient``), so its settle, retry and generation logic is what is tested.

A test chooses the faults Swift and its network give a real driver:

- a **crash** of the process making the requests: its n-th next request is lost before Swift
  applies it, or applied with the answer lost; from then on every request of that process
  fails until the test starts it again (``Process.restart``);
- an **overtaken update**: a POST or DELETE refused with 409, as Swift refuses an update
  older than the object's latest;
- **listing lag**: listings show containers as they were some writes ago (a container
  server's update arrives late), while reads by name are current;
- **replacement windows** (``replacement_windows``): an object server replaces an object's
  data (a blind PUT over it) or its metadata (a POST after an earlier POST) by renaming the
  new file in and unlinking the old one, while the request it serves meanwhile may have
  listed the old file and finds it gone. The request Swift answers next after such a
  replacement sees no object by that name: a read answers 404, and a create-only write
  passes its check and stores over it (its timestamp being later). A first POST adds a file
  and unlinks none, so it opens no window;
- **concurrent creations** (``creation_window``): an object server checks that an object is
  absent before it receives the data, so a create-only write whose check came before another
  creation was committed passes it too, and stores over that creation (its timestamp being
  later). A create-only write of another process stores over a creation this way while the
  creation is the object's latest version, its creator has not requested the object since
  (it reads it back after the settle wait, by which every such write is assumed committed)
  and fewer than ``creation_window`` requests have been answered since it.
"""

from __future__ import annotations

import dataclasses
import enum
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any, TypeVar

from swiftclient.exceptions import ClientException

from zaqar_delay.storage.swift.access import SwiftAccess, access_from_uri
from zaqar_delay.storage.swift.connect import SwiftClient
from zaqar_delay.storage.swift.parallel import run_now

T = TypeVar("T")
R = TypeVar("R")


@dataclasses.dataclass(frozen=True)
class Version:
    """One state of an object: written at ``seq`` (``body`` None: deleted)."""

    seq: int
    body: bytes | None
    content_type: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    # Whether a POST wrote it (its metadata is a file of its own, which a next POST replaces).
    posted: bool = False


class Fault(enum.Enum):
    LOST = "lost"  # the request never reaches Swift
    UNANSWERED = "unanswered"  # Swift applies it, the answer never arrives
    OVERTAKEN = "overtaken"  # a POST or DELETE refused with 409 (other requests: LOST)


@dataclasses.dataclass
class Process:
    """One process of the driver: its requests, and the fault planned for one of them."""

    name: str
    requests: int = 0
    # (request number, fault): the fault hits that request of this process.
    planned: tuple[int, Fault] | None = None
    crashed: bool = False

    def plan(self, after: int, fault: Fault) -> None:
        """Let the ``after``-th next request (0: the next one) meet ``fault``."""
        self.planned = (self.requests + after, fault)

    def restart(self) -> None:
        self.planned, self.crashed = None, False

    def meet(self, method: str, send: Callable[[], Any]) -> Any:
        """Make the request ``method`` (``send()`` makes it) as this process, meeting the
        fault planned for it; a process that crashed sends nothing more."""
        number = self.requests
        self.requests += 1
        if self.crashed:
            raise ClientException("the process is gone", http_status=None)
        fault = None
        if self.planned is not None and self.planned[0] == number:
            fault, self.planned = self.planned[1], None
        if fault is Fault.OVERTAKEN and method in ("post_object", "delete_object"):
            raise ClientException("overtaken", http_status=409)
        if fault is not None:
            self.crashed = True
        if fault in (Fault.LOST, Fault.OVERTAKEN):
            raise ClientException("the request was lost", http_status=None)
        answer = send()
        if fault is Fault.UNANSWERED:
            raise ClientException("the answer was lost", http_status=None)
        return answer


class MemorySwift:
    """The objects of one Swift account, in memory, with their history."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, dict[str, list[Version]]] = {}
        self._seq = 0
        # Listings show containers as they were this many writes ago.
        self.listing_lag = 0
        # How long each request takes.
        self.pause_s = 0.0
        # Whether replacing an object lets the next request miss it (see the module).
        self.replacement_windows = False
        self._replacing: tuple[str, str] | None = None
        self._hidden: tuple[str, str] | None = None
        # Requests after a creation during which another process's creation may store over
        # it (see the module; 0: none), the creations still open so (their creator and
        # version, and the request count when each was made), and the process requesting.
        self.creation_window = 0
        self._open: dict[tuple[str, str], tuple[str, int, int]] = {}
        self._requests = 0
        self._requester = ""
        # The objects (container, name) a create-only write stored over a concurrent creation
        # of, once each time.
        self.creations_overwritten: list[tuple[str, str]] = []

    # -- the state -----------------------------------------------------------------------------

    def current(self, container: str, name: str) -> Version | None:
        if (container, name) == self._hidden:
            return None
        versions = self._objects.get(container, {}).get(name)
        if not versions or versions[-1].body is None:
            return None
        return versions[-1]

    def names(self, container: str, prefix: str = "") -> list[str]:
        """The current objects' names under ``prefix``, in name order."""
        found = self._objects.get(container, {})
        return sorted(n for n in found if n.startswith(prefix) and self.current(container, n))

    def expire(self, now_s: int) -> list[str]:
        """What Swift's object expirer does at ``now_s``: every object whose ``X-Delete-At``
        has passed deleted; their names."""
        with self._lock:
            gone = []
            for container, objects in self._objects.items():
                for name in list(objects):
                    version = self.current(container, name)
                    delete_at = dict(version.headers).get("x-delete-at") if version else None
                    if delete_at is not None and int(delete_at) <= now_s:
                        self._seq += 1
                        self._record(container, name, Version(self._seq, None))
                        gone.append(name)
            return gone

    def _listed(self, container: str, name: str) -> Version | None:
        """The object as a listing shows it now, ``listing_lag`` writes late."""
        seen = self._seq - self.listing_lag
        shown = [v for v in self._objects[container][name] if v.seq <= seen]
        return shown[-1] if shown and shown[-1].body is not None else None

    def _record(self, container: str, name: str, version: Version) -> None:
        self._objects[container].setdefault(name, []).append(version)

    # -- requests ------------------------------------------------------------------------------

    def request(self, process: Process, method: str, *args: Any, **kwargs: Any) -> Any:
        """Answer one request of ``process``, meeting the fault planned for it, if any."""
        if self.pause_s:  # not even sleep(0): a system call each, most of a test's time
            time.sleep(self.pause_s)
        with self._lock:
            # The object being replaced, if any, is missed by this request alone.
            self._hidden, self._replacing = self._replacing, None
            self._requests += 1
            self._requester = process.name
            # A creation is committed by the time its creator reads it back after the
            # settle wait, or a few requests after it.
            named = tuple(args[:2]) if method.endswith("_object") else None
            self._open = {
                key: (creator, seq, at)
                for key, (creator, seq, at) in self._open.items()
                if (key != named or creator != process.name)
                and self._requests - at <= self.creation_window
            }
            try:
                return process.meet(method, lambda: getattr(self, method)(*args, **kwargs))
            finally:
                self._hidden = None

    def _replaced(self, container: str, name: str) -> None:
        if self.replacement_windows:
            self._replacing = (container, name)

    def head_account(self) -> dict[str, str]:
        return {}

    def put_container(self, container: str) -> None:
        self._objects.setdefault(container, {})

    def put_object(
        self,
        container: str,
        name: str,
        contents: Any,
        content_length: int,
        content_type: str,
        headers: Mapping[str, str],
        response_dict: dict[str, Any],
    ) -> None:
        body = contents.read()
        assert len(body) == content_length
        headers = dict(headers)
        create_only = headers.pop("If-None-Match", None) == "*"
        existing = self.current(container, name)
        if create_only and existing and not self._creation_open(container, name, existing):
            response_dict["status"] = 412
            raise ClientException("exists", http_status=412)
        if existing:
            self._replaced(container, name)
            if create_only:
                self.creations_overwritten.append((container, name))
        self._seq += 1
        kept = tuple(sorted((k.lower(), str(v)) for k, v in headers.items()))
        self._record(container, name, Version(self._seq, body, content_type, kept))
        if create_only:
            self._open[(container, name)] = (self._requester, self._seq, self._requests)
        response_dict["status"] = 201

    def _creation_open(self, container: str, name: str, existing: Version) -> bool:
        """Whether a create-only write of the requester passes its check against
        ``existing``, a concurrent creation not committed when the check was made."""
        creator, seq, _ = self._open.get((container, name), ("", -1, 0))
        return existing.seq == seq and creator != self._requester

    def _found(self, container: str, name: str) -> Version:
        version = self.current(container, name)
        if version is None:
            raise ClientException("not found", http_status=404)
        return version

    def head_object(self, container: str, name: str) -> dict[str, str]:
        version = self._found(container, name)
        return {"content-type": version.content_type, **dict(version.headers)}

    def get_object(
        self, container: str, name: str, headers: Mapping[str, str] | None = None
    ) -> tuple[dict[str, str], bytes]:
        version = self._found(container, name)
        assert version.body is not None
        return self.head_object(container, name), version.body

    def post_object(self, container: str, name: str, headers: Mapping[str, str]) -> None:
        """Replace the user metadata (and ``X-Delete-At``) with ``headers``; a
        ``Content-Type`` among them replaces the content type."""
        version = self._found(container, name)
        update = {k.lower(): str(v) for k, v in headers.items()}
        content_type = update.pop("content-type", version.content_type)
        kept = {
            k: v for k, v in version.headers if not k.startswith(("x-object-meta-", "x-delete"))
        }
        if version.posted:
            self._replaced(container, name)
        self._seq += 1
        self._record(
            container,
            name,
            Version(
                self._seq,
                version.body,
                content_type,
                tuple(sorted({**kept, **update}.items())),
                posted=True,
            ),
        )

    def delete_object(self, container: str, name: str) -> None:
        self._found(container, name)
        self._seq += 1
        self._record(container, name, Version(self._seq, None))

    def get_container(
        self,
        container: str,
        prefix: str,
        marker: str,
        end_marker: str,
        limit: int,
        query_string: str | None,
    ) -> tuple[dict[str, str], list[dict[str, Any]]]:
        listed = []
        for name in sorted(self._objects[container], reverse=query_string == "reverse=on"):
            if not name.startswith(prefix) or (marker and name <= marker):
                continue
            if end_marker and name >= end_marker:
                continue
            version = self._listed(container, name)
            if version is not None:
                assert version.body is not None
                entry = {"name": name, "content_type": version.content_type}
                listed.append({**entry, "bytes": len(version.body)})
            if len(listed) == limit:
                break
        return {}, listed


class TakingTurns(MemorySwift):
    """Swift in memory answering the requests of several processes in the order ``turns``
    names them (a process not named next waits; one finished is skipped), then one request of
    each process ``then`` names in turn, then in any order."""

    def __init__(self) -> None:
        super().__init__()
        self._turns: list[str] = []
        self._then: list[str] = []
        self._finished: set[str] = set()
        self._turn = threading.Condition()

    def request(self, process: Process, method: str, *args: Any, **kwargs: Any) -> Any:
        # The request is answered before the next turn is looked at, so the order is the
        # one the turns give, whichever thread the scheduler runs first.
        with self._turn:
            while (due := self._due()) is not None and due != process.name:
                self._turn.wait(0.01)
            if self._turns:
                self._turns.pop(0)
            elif process.name in self._then:
                self._then.remove(process.name)
                self._then.append(process.name)
            try:
                return super().request(process, method, *args, **kwargs)
            finally:
                self._turn.notify_all()

    def _due(self) -> str | None:
        """The process whose request is answered next (None: any)."""
        while self._turns and self._turns[0] in self._finished:
            self._turns.pop(0)
        if self._turns:
            return self._turns[0]
        return next((name for name in self._then if name not in self._finished), None)

    def take_turns(self, turns: list[str], then: list[str] | None = None) -> None:
        with self._turn:
            self._turns, self._then = list(turns), list(then or [])

    def finish(self, process: str) -> None:
        with self._turn:
            self._finished.add(process)
            self._turn.notify_all()

    def reset_turns(self) -> None:
        """Answer requests in any order again, every process unfinished."""
        with self._turn:
            self._turns, self._then, self._finished = [], [], set()
            self._turn.notify_all()

    def at_once(self, calls: Mapping[str, Callable[[], T]]) -> dict[str, T]:
        """What each call answered, all run at once, each on a thread of its own as the
        process its key names, in the turns set before; then the turns are reset. The first
        call that raised has its exception raised here (a thread cannot fail a test)."""
        answers: dict[str, T] = {}
        failures: list[BaseException] = []

        def run(name: str, call: Callable[[], T]) -> None:
            try:
                answers[name] = call()
            except BaseException as exc:  # noqa: BLE001 - raised below
                failures.append(exc)
            finally:
                self.finish(name)

        threads = [threading.Thread(target=run, args=item) for item in calls.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        self.reset_turns()
        assert all(not thread.is_alive() for thread in threads), "an operation never returned"
        if failures:
            raise failures[0]
        return answers


class MemoryConnection:
    """What ``SwiftClient`` calls of a python-swiftclient ``Connection``, answered by a
    ``MemorySwift`` on behalf of one process."""

    token = None  # never refused: a body is never sent twice

    def __init__(self, swift: MemorySwift, process: Process) -> None:
        self._swift = swift
        self._process = process

    def __getattr__(self, method: str) -> Any:
        return lambda *args, **kwargs: self._swift.request(self._process, method, *args, **kwargs)

    def close(self) -> None:
        pass


class FaultyConnection:
    """A python-swiftclient ``Connection`` to a real Swift whose requests meet the faults
    planned for one process."""

    def __init__(self, connection: Any, process: Process) -> None:
        self._connection = connection
        self._process = process

    @property
    def token(self) -> Any:
        return self._connection.token

    def __getattr__(self, method: str) -> Any:
        call = getattr(self._connection, method)
        return lambda *args, **kwargs: self._process.meet(method, lambda: call(*args, **kwargs))

    def close(self) -> None:
        self._connection.close()


class InlineSwiftClient(SwiftClient):
    """A ``SwiftClient`` making its requests one after another on the caller's thread, so
    a test's faults meet the same request each time it runs."""

    def submit(self, function: Callable[..., R], *args: Any) -> Future[R]:
        return run_now(function, *args)

    def each(self, function: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """Every call made, in order; then the first failure raised, as the pool does."""
        outcomes = [self.submit(function, item) for item in items]
        return [outcome.result() for outcome in outcomes]


class MemoryClient(InlineSwiftClient):
    """A client of a ``MemorySwift`` as one process."""

    def __init__(self, swift: MemorySwift, process: Process) -> None:
        access = SwiftAccess("memory/auth/v1.0", "a:u", "", "", settle_ms=0, metadata_cache_ms=0)
        super().__init__(access)
        self._swift, self._process = swift, process

    def _new_connection(self) -> Any:
        return MemoryConnection(self._swift, self._process)


class FaultyClient(InlineSwiftClient):
    """A client of a real Swift as one process, whose requests meet the faults it plans."""

    def __init__(self, access: SwiftAccess, process: Process) -> None:
        super().__init__(access)
        self._process = process

    def _new_connection(self) -> Any:
        return FaultyConnection(super()._new_connection(), self._process)


def memory_client(swift: MemorySwift, process: Process) -> InlineSwiftClient:
    """A client of ``swift`` as ``process``, with no settle wait and no metadata cache."""
    return MemoryClient(swift, process)


def faulty_client(uri: str, process: Process, settle_ms: int) -> InlineSwiftClient:
    """A client of the Swift at the store URI ``uri`` as ``process``, with no metadata
    cache."""
    access = dataclasses.replace(access_from_uri(uri), settle_ms=settle_ms, metadata_cache_ms=0)
    return FaultyClient(access, process)
