"""What a server process ends when it stops serving.

The parts that hold requests or work open for long (a waiting-claim room, a WebSocket
session, a push dispatcher) are tracked here while they live; the server's worker calls
:func:`stop_serving` as it stops (cmd/worker.py), so that each answers, closes or settles what
it holds instead of keeping the worker until it is killed.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# Each live part, and how it stops (a function of the part: a bound method would keep it).
_LIVE: weakref.WeakKeyDictionary[Any, Callable[[Any], None]] = weakref.WeakKeyDictionary()


def track(part: T, stop: Callable[[T], None]) -> None:
    """Call ``stop(part)`` when this process stops serving, if ``part`` still lives then and
    was not forgotten."""
    _LIVE[part] = stop


def forget(part: object) -> None:
    _LIVE.pop(part, None)


def stop_serving() -> None:
    """This process takes no more requests: every part tracked stops, once, each in a thread
    of its own, so that one that waits (a dispatcher, for its requests in flight) holds back
    none of the others; returns when all have."""
    parts = list(_LIVE.items())
    _LIVE.clear()
    stops = [threading.Thread(target=stop, args=(part,), daemon=True) for part, stop in parts]
    for thread in stops:
        thread.start()
    for thread in stops:
        thread.join()
