"""Pushes that fire recurring schedules.

A target's tick queue has one subscription, ``zaqar-schedule:``, made by the server (no
client can name the scheme), and its messages are its schedules' ticks
(``schedules/firing.py``). Its push is not sent anywhere: the ticks are handed to the
service's ``fire_many`` in process, those of one tick queue leased together in one call (they
then share their store calls). A tick whose fire raised (a store that fails) is retried as a
push is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from zaqar_delay.models import Delivery
from zaqar_delay.push.webhook import Outcome
from zaqar_delay.schedules.names import SCHEDULE_SUBSCRIBER

# (project, tick queue, tick bodies, now in ms) -> for each tick None (fired) or what failed:
# what ``Schedules.fire_many`` takes and answers.
FireMany = Callable[[str, str, Sequence[Any], int], list[Exception | None]]


def is_schedule(subscriber: str) -> bool:
    """Whether ``subscriber`` is a schedule's (the server's own subscriber)."""
    return subscriber == SCHEDULE_SUBSCRIBER


class ScheduleSender:
    """Hands ticks to ``fire`` (None: this process fires none, and retries later)."""

    def __init__(self, fire: FireMany | None) -> None:
        self._fire = fire

    def send(self, delivery: Delivery, now_ms: int) -> Outcome:
        return self.send_many([delivery], now_ms)[0]

    def send_many(self, deliveries: Sequence[Delivery], now_ms: int) -> list[Outcome]:
        """Fire ticks of one tick queue together: each one's outcome, in order."""
        if self._fire is None:
            return [Outcome("retry", "this server process fires no schedules")] * len(deliveries)
        first = deliveries[0]
        bodies = [delivery.message.body for delivery in deliveries]
        try:
            failures = self._fire(first.project, first.queue, bodies, now_ms)
        except Exception as exc:  # noqa: BLE001 - a store that fails: the ticks are retried
            failures = [exc] * len(deliveries)
        return [
            Outcome("delivered")
            if failure is None
            else Outcome(
                "retry", f"the schedule could not fire: {type(failure).__name__}: {failure}"
            )
            for failure in failures
        ]
