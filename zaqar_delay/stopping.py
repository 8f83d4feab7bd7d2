"""What a server process ends when it stops serving.

The parts of the API that hold a request open for long (waiting claims, WebSocket sessions)
register a hook here when they are imported; the server's worker calls :func:`stop_serving`
as it stops (cmd/worker.py), so that each answers or closes what it holds instead of keeping
the worker until it is killed.
"""

from __future__ import annotations

from collections.abc import Callable

_HOOKS: list[Callable[[], None]] = []


def when_stopping(hook: Callable[[], None]) -> Callable[[], None]:
    """Call ``hook`` when this process stops serving (a decorator)."""
    _HOOKS.append(hook)
    return hook


def stop_serving() -> None:
    """This process takes no more requests: end what is held open (each hook once)."""
    hooks, _HOOKS[:] = list(_HOOKS), []
    for hook in hooks:
        hook()
