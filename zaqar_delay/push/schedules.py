"""Pushes that fire recurring schedules.

A target's tick queue has one subscription, ``zaqar-schedule:``, made by the server (no
client can name the scheme), and its messages are its schedules' ticks
(``schedules/book.py``). Its push is not sent anywhere: the tick is handed to the service's
``fire`` in process. A fire that raises (a store that fails) is retried as a push is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from zaqar_delay.models import Delivery
from zaqar_delay.push.webhook import Outcome
from zaqar_delay.schedules.names import SCHEDULE_SUBSCRIBER

# (project, tick queue, tick body, now in ms): what ``Schedules.fire`` takes.
Fire = Callable[[str, str, Any, int], None]


def is_schedule(subscriber: str) -> bool:
    """Whether ``subscriber`` is a schedule's (the server's own subscriber)."""
    return subscriber == SCHEDULE_SUBSCRIBER


class ScheduleSender:
    """Hands each tick to ``fire`` (None: this process fires none, and retries later)."""

    def __init__(self, fire: Fire | None) -> None:
        self._fire = fire

    def send(self, delivery: Delivery, now_ms: int) -> Outcome:
        if self._fire is None:
            return Outcome("retry", "this server process fires no schedules")
        try:
            self._fire(delivery.project, delivery.queue, delivery.message.body, now_ms)
        except Exception as exc:  # noqa: BLE001 - a store that fails: the tick is retried
            return Outcome("retry", f"the schedule could not fire: {type(exc).__name__}: {exc}")
        return Outcome("delivered")
