"""What a schedule's failing fires leave for its readers: the last failure, and since when.

A fire that fails leaves its tick to be retried (``names.TICK_RETRIES``), never given up, so
a schedule whose message its queue now refuses (the queue's size limit lowered, its message
quota full) would otherwise show only an old ``last_fire``. Each such failure is recorded in
the schedule's error queue (``names.error_queue``), which only failing fires write: a failure
never overwrites what a fire that succeeded recorded, nor the reverse. A failure counts as
the schedule's current one (``last_error``) while it is later than the schedule's last fire
and of the schedule as written now; ``since`` is when the failures that run ends began.

A store that fails (``StorageUnavailable``) is not recorded: the schedule lives on its
queue's store, so the record would most likely fail too, and a reader of the schedule gets
that store's 503 anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from zaqar_delay import errors
from zaqar_delay.models import Metadata
from zaqar_delay.schedules.records import Records

LOG = logging.getLogger(__name__)

#: What a failure that is not one of the service's own errors says (a bug: its log has why).
UNEXPECTED = ("Internal server error", "The fire failed unexpectedly; the server log says why.")
# Each schedule whose tick's fire failed: the tick, and what its fire raised.
Failed = Mapping[str, tuple[Mapping[str, Any], Exception]]

#: The fields of a recorded failure that a reader of the schedule sees.
SHOWN = ("at", "since", "slot", "title", "description")


def described(failure: Exception) -> tuple[str, str]:
    """The title and description a reader of the schedule sees for ``failure``."""
    if isinstance(failure, errors.ZaqarDelayError):
        return failure.title, failure.description
    return UNEXPECTED


def current(definition: Metadata, state: Metadata, failure: Metadata) -> dict[str, Any] | None:
    """The schedule's current failure (None: its last fire succeeded, or none failed): the
    recorded ``failure`` when it is of the schedule's generation, later than its last write
    and later than its last fire (``state``; a fire that succeeded at the same moment wins)."""
    if not failure or failure.get("generation") != definition.get("generation"):
        return None
    at = int(failure["at"])
    if at < int(definition["written_ms"]) or at <= int(state.get("at", -1)):
        return None
    return {key: failure[key] for key in SHOWN}


class Failures:
    """Records the failures of fires, over ``records``."""

    def __init__(self, records: Records) -> None:
        self.records = records

    def record(self, project: str, target: str, failed: Failed, now_ms: int) -> None:
        """Record, for each schedule named in ``failed``, what its tick's fire raised (a
        tick of a schedule written since, or deleted, records nothing). Best effort: a
        record that fails is logged, and the ticks are retried all the same."""
        kept = {
            name: one
            for name, one in failed.items()
            if not isinstance(one[1], errors.StorageUnavailable)
        }
        if not kept:
            return
        try:
            self._record(project, target, kept, now_ms)
        except Exception:  # the record is best effort: the ticks are retried all the same
            LOG.warning(
                "recording the failed fires of schedules %s of %s failed",
                sorted(kept),
                target,
                exc_info=True,
            )

    def _record(self, project: str, target: str, failed: Failed, now_ms: int) -> None:
        definitions, states, earlier = self.records.read(project, target, failed)
        written = {}
        for name, (tick, failure) in failed.items():
            definition = definitions[name]
            if definition is None or tick.get("generation") != definition.get("generation"):
                continue
            ongoing = current(definition, states[name], earlier[name])
            title, description = described(failure)
            written[name] = {
                "at": now_ms,
                "since": now_ms if ongoing is None else ongoing["since"],
                "slot": int(tick.get("slot", 0)),
                "generation": definition["generation"],
                "title": title,
                "description": description,
            }
        if written:
            self.records.write_failures(project, target, written, now_ms)
