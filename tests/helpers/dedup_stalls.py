"""Posts stalled between reserving their dedup ids and storing their messages (MongoDB and
Swift, whose posts reserve their ids first), for tests of what a repeat does meanwhile."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from zaqar_delay.models import Posted


def repeated_while_stalled(
    patched: pytest.MonkeyPatch,
    driver: Any,
    repeat: Callable[[], Posted],
    then: Callable[[], None] = lambda: None,
) -> list[Posted]:
    """The next post of ``driver`` runs ``repeat`` once it has reserved its dedup ids, before
    it stores anything (the repeat's own reservation goes through), then ``then``; the
    repeat's answer is in the list returned once the post got that far."""
    reserve = driver._dedup.reserve
    repeats: list[Posted] = []

    def reserve_then_stall(*args: Any) -> Any:
        reserved = reserve(*args)
        if not repeats:
            repeats.append(Posted([], ()))  # the repeat's own reservation is not stalled
            repeats[0] = repeat()
            then()
        return reserved

    patched.setattr(driver._dedup, "reserve", reserve_then_stall)
    return repeats
