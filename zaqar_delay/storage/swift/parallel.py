"""The threads on which a Swift client makes a call's requests at once (a post's objects, a
claim's messages), and the rule that keeps nested calls from waiting on themselves."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

# Requests a driver runs at once for one call (a post's objects, a claim's messages).
PARALLEL_REQUESTS = 16
# The names of the threads that make a driver's requests in parallel.
POOL_THREADS = "zd-swift"
# Set in the pool's threads (greenlets under gevent), so nested calls can tell.
_POOL_THREAD = threading.local()


def _mark_pool_thread() -> None:
    _POOL_THREAD.marked = True


def run_now(function: Callable[..., R], *args: Any) -> Future[R]:
    """``function(*args)`` run on this thread, its result or failure in a done future."""
    done: Future[R] = Future()
    try:
        done.set_result(function(*args))
    except Exception as exc:  # noqa: BLE001 - handed over with the future
        done.set_exception(exc)
    return done


class Parallel:
    """A pool of ``threads`` request threads."""

    def __init__(self, threads: int = PARALLEL_REQUESTS) -> None:
        self._pool = ThreadPoolExecutor(
            threads, thread_name_prefix=POOL_THREADS, initializer=_mark_pool_thread
        )

    @staticmethod
    def _in_pool() -> bool:
        return getattr(_POOL_THREAD, "marked", False)

    def submit(self, function: Callable[..., R], *args: Any) -> Future[R]:
        """``function(*args)`` on the pool's threads (at once, from a pool thread)."""
        if self._in_pool():
            return run_now(function, *args)
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
