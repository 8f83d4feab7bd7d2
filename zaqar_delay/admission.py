"""Turns at work in one server process, shared fairly between projects (``[server]
max_active_requests``).

A worker runs its requests as greenlets on one core, so every request it serves at once
shares that core: a project sending a hundred large listings together puts a hundred
chunks of work ahead of any other project's small post, which then waits seconds, and their
store calls queue for the process's connections to the store until they fail. So at most
``most`` requests of a process are at work at once. Past that, a request waits for a turn
in its project's line, and a turn that ends goes to the line of the project with the fewest
requests at work, and among equals to the one whose last turn began longest ago (a project
with none at work and none waiting is forgotten, so its next request comes first): a
project alone still gets every turn, the projects with requests waiting get turns in
rotation, and another project's request waits for the next turn to end, not for the whole
backlog.

A request that waits on something else than work (a claim waiting for a message,
:func:`stepped_aside`) gives its turn up while it waits and stands in line for one again
after.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass(eq=False)
class _Waiter:
    project: str
    since: float = field(default_factory=time.monotonic)
    granted: threading.Event = field(default_factory=threading.Event)


class _Turn:
    """A turn of ``project``, held for a ``with`` block (a class, not a generator: it is
    taken for every request)."""

    __slots__ = ("_token", "admission", "held", "project")

    def __init__(self, admission: Admission, project: str) -> None:
        self.admission, self.project = admission, project
        self.held = False

    def __enter__(self) -> None:
        self.take()
        self._token = _current.set(self)

    def __exit__(self, *_: object) -> None:
        _current.reset(self._token)
        if self.held:  # not when the request was killed waiting to take it again
            self.give()

    def take(self) -> None:
        self.admission._take(self.project)
        self.held = True

    def give(self) -> None:
        self.held = False
        self.admission._give(self.project)


_current: contextvars.ContextVar[_Turn | None] = contextvars.ContextVar(
    "zaqar_delay_turn", default=None
)


class _Standing:
    """A project's requests at work in the process, and when its last turn began (the count
    of turns begun then)."""

    __slots__ = ("served", "working")

    def __init__(self, served: int) -> None:
        self.working, self.served = 1, served


class Admission:
    """At most ``most`` requests of this process at work at once (0: no limit), the turns
    shared between projects' lines as the module says; ``waited`` is told how many seconds
    each request that waited for its turn waited."""

    def __init__(self, most: int = 0, waited: Callable[[float], None] | None = None) -> None:
        self.most = most
        self._waited = waited
        self._lock = threading.Lock()
        self._total = 0
        self._begun = 0
        # Projects with requests at work or waiting: no others, so it stays as small as that.
        self._standings: dict[str, _Standing] = {}
        self._lines: dict[str, collections.deque[_Waiter]] = {}

    @property
    def working(self) -> int:
        """Requests at work now."""
        return self._total

    @property
    def waiting(self) -> int:
        """Requests waiting for a turn now."""
        with self._lock:
            return sum(len(line) for line in self._lines.values())

    def turn(self, project: str) -> contextlib.AbstractContextManager[None]:
        """Hold a turn of ``project`` for the ``with`` block, waiting for one first if none
        is free."""
        return _Turn(self, project)

    def _take(self, project: str) -> None:
        with self._lock:
            if not self.most or self._total < self.most:
                self._start(project)
                return
            waiter = _Waiter(project)
            self._lines.setdefault(project, collections.deque()).append(waiter)
        try:
            waiter.granted.wait()
        except BaseException:
            self._leave(waiter)
            raise
        if self._waited is not None:
            self._waited(time.monotonic() - waiter.since)

    def _leave(self, waiter: _Waiter) -> None:
        """A waiter that stops waiting (its greenlet killed): out of its line, and the turn
        it was handed meanwhile goes on to the next."""
        with self._lock:
            line = self._lines.get(waiter.project)
            if line is not None and waiter in line:
                line.remove(waiter)
                if not line:
                    del self._lines[waiter.project]
                    self._forget_if_idle(waiter.project)
                return
        self._give(waiter.project)

    def _give(self, project: str) -> None:
        with self._lock:
            self._standings[project].working -= 1
            self._total -= 1
            self._forget_if_idle(project)
            if not self._lines:
                return
            # Handed over, not freed: a request arriving meanwhile cannot take it first.
            chosen = min(self._lines.values(), key=self._precedence)
            waiter = chosen.popleft()
            if not chosen:
                del self._lines[waiter.project]
            self._start(waiter.project)
        waiter.granted.set()

    def _forget_if_idle(self, project: str) -> None:
        """Drop ``project``'s standing once it has none at work and none waiting (under the
        lock), so its next request ranks first."""
        standing = self._standings.get(project)
        if standing is not None and not standing.working and project not in self._lines:
            del self._standings[project]

    def _start(self, project: str) -> None:
        """``project`` has one more request at work (under the lock)."""
        self._total += 1
        self._begun += 1
        standing = self._standings.get(project)
        if standing is None:
            self._standings[project] = _Standing(self._begun)
        else:
            standing.working += 1
            standing.served = self._begun

    def _precedence(self, line: collections.deque[_Waiter]) -> tuple[int, int, float]:
        """The order lines get turns in: fewest at work, then the longest since a turn,
        then the longest waiting."""
        first = line[0]
        standing = self._standings.get(first.project)
        if standing is None:
            return 0, -1, first.since
        return standing.working, standing.served, first.since


@contextlib.contextmanager
def stepped_aside() -> Iterator[None]:
    """Give up the calling request's turn for the block (it waits, doing no work), and
    wait for one again after it; nothing when the request holds none."""
    current = _current.get()
    if current is None:
        yield
        return
    current.give()
    try:
        yield
    finally:
        current.take()
