"""Moving the messages a claim found over ``_max_claim_count`` to their dead-letter queue,
written once for every store and for a dead-letter queue on another store (pools).

The store's claim reports them (``ClaimOutcome.over_limit``) and leaves them where they
were, taken as a claim takes them; this module moves them. Nothing here needs the two
stores to be one: the copy is made first and is idempotent by id, then the originals are
deleted, so a crash in between leaves them in their queue, where the next claim finds them
over the limit again and moves them again, storing nothing twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zaqar_delay.models import OverLimit

if TYPE_CHECKING:
    from zaqar_delay.storage.base import Driver


def move(
    source: Driver, project: str, queue: str, over: OverLimit, target: Driver, now_ms: int
) -> None:
    """Move the messages ``over`` reports from ``queue`` on ``source`` to ``over.queue`` on
    ``target``: within the store when it is the same one (which may do it in place, see
    ``Driver.move_dead_letters``), else a copy to ``target``, then a delete from ``source``."""
    if target is source:
        source.move_dead_letters(project, queue, over, now_ms)
    else:
        copy_then_delete(source, project, queue, over, target, now_ms)


def copy_then_delete(
    source: Driver, project: str, queue: str, over: OverLimit, target: Driver, now_ms: int
) -> None:
    """Copy the messages ``over`` reports to ``over.queue`` on ``target``
    (``Driver.receive_dead_letters``), then delete them from ``queue`` on ``source``
    (``Driver.delete_dead_letters``)."""
    target.receive_dead_letters(project, over, now_ms)
    source.delete_dead_letters(project, queue, over, now_ms)
