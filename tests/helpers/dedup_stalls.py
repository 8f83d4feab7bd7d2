"""Posts stalled between reserving their dedup ids and storing their messages (MongoDB and
Swift, whose posts reserve their ids first), for tests of what a repeat does meanwhile."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from zaqar_delay.models import Posted


class Stall:
    """A post held once it has reserved its dedup ids (``reserved`` is set) until ``go`` is
    set; called by :func:`after_reserving`."""

    def __init__(self) -> None:
        self.reserved, self.go = threading.Event(), threading.Event()

    def __call__(self) -> None:
        self.reserved.set()
        self.go.wait(20)


def after_reserving(
    patched: pytest.MonkeyPatch, driver: Any, meanwhile: dict[str, Callable[[], None]]
) -> None:
    """A post in a thread named in ``meanwhile`` runs its function once it has reserved its
    dedup ids, before it stores its messages: until then its records are unconfirmed and its
    messages missing."""
    reserve = driver._dedup.reserve

    def reserve_then(*args: Any) -> Any:
        reserved = reserve(*args)
        meanwhile.get(threading.current_thread().name, lambda: None)()
        return reserved

    patched.setattr(driver._dedup, "reserve", reserve_then)


def repeated_while_stalled(
    patched: pytest.MonkeyPatch,
    driver: Any,
    repeat: Callable[[], Posted],
    then: Callable[[], None] = lambda: None,
) -> list[Posted]:
    """The next post of ``driver`` in this thread runs ``repeat`` once it has reserved its
    dedup ids, before it stores anything (the repeat's own reservation goes through), then
    ``then``; the repeat's answer is in the list returned once the post got that far."""
    repeats: list[Posted] = []

    def repeat_once() -> None:
        if not repeats:
            repeats.append(Posted([], ()))  # the repeat's own reservation is not stalled
            repeats[0] = repeat()
            then()

    after_reserving(patched, driver, {threading.current_thread().name: repeat_once})
    return repeats
