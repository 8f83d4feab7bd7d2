"""When a schedule fires: its plan, checked once when the schedule is written.

A plan is a 5-field cron expression read in an IANA time zone (``cron``, ``timezone``,
default ``UTC``), or a fixed interval (``every`` seconds), optionally bounded by ``start_at``
and ``end_at`` (RFC 3339 times) and by a ``limit`` of fires. Its *slots* are the instants it
fires at, in epoch milliseconds.

- Cron slots are computed by CronSim, which follows Debian's cron in a time zone's
  transitions: a slot that does not exist in local time (spring forward) fires once at the
  first instant after the gap; a slot that exists twice (fall back) fires once, at its first
  occurrence. An expression that names every hour (``*/15 * * * *``) keeps firing through
  the repeated hour, since those slots are minutes of real time.
- Interval slots are ``start_at + k * every`` (``k >= 0``) or, without ``start_at``, counted
  from when the schedule was written (``k >= 1``).
- After an outage the slots missed are fired as ``misfire`` says: ``skip`` (the default) fires
  the latest missed slot once; ``all`` fires each, at most ``MAX_CATCH_UP`` of them (the
  latest ones). Finding them costs the same however long the outage was: interval slots are
  counted, not walked, and a cron span of more than ``MAX_COUNTED`` slots is read back from
  its end.

A plan with no slot left after the time it is written (past its ``end_at``, its ``limit``
or the year 9000) is refused, and so is one whose first slot is more than
``MAX_MESSAGE_TTL`` (about 136 years) away: its tick would expire before it. Every expression
CronSim accepts matches again: it refuses a day a month never has (``30 2``), and the longest
two slots can be apart is 40 years (the fifth Friday of February, ``* 2 5#5``, across a year
such as 2100 that is not a leap year), so the next slot is looked for as far ahead as it is.
No slot is later than ``LATEST_SLOT_MS`` (the year 9000): far past any use, and far enough
from the end of Python's dates (9999) for time zones and a cron search ahead to stay within
them.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import functools
import itertools
import zoneinfo
from collections.abc import Iterator, Mapping
from typing import Any, cast

from cronsim import CronSim, CronSimError

from zaqar_delay import errors
from zaqar_delay.conf.transport import MAX_MESSAGE_TTL
from zaqar_delay.validation import EPOCH, INT64_MAX, epoch_ms_of, is_int

MISFIRE_POLICIES = ("skip", "all")
# The most slots one catch-up fires with misfire "all".
MAX_CATCH_UP = 100
# The most missed slots one late fire counts; a cron span is walked that far at most.
MAX_COUNTED = 10_000
# The longest interval.
MAX_EVERY_S = 366 * 86400
LATEST_SLOT = datetime.datetime(9000, 1, 1, tzinfo=datetime.UTC)
LATEST_SLOT_MS = (LATEST_SLOT - EPOCH) // datetime.timedelta(milliseconds=1)
MAX_CRON_LENGTH = 200
PLAN_KEYS = frozenset(("cron", "timezone", "every", "start_at", "end_at", "limit", "misfire"))


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    """The slots of a schedule. ``anchor_ms`` is when an interval counts from: ``start_at``,
    or the time the schedule was written (its first slot is then one interval later)."""

    cron: str | None = None
    timezone: str = "UTC"
    every_s: int | None = None
    start_at_ms: int | None = None
    end_at_ms: int | None = None
    limit: int | None = None
    misfire: str = "skip"
    anchor_ms: int = 0

    def slots_after(self, after_ms: int, fired: int = 0) -> Iterator[int]:
        """The slots strictly after ``after_ms``, in order, within ``start_at``/``end_at`` and
        the fires ``limit`` leaves after ``fired`` fires."""
        if self.limit is not None and fired >= self.limit:
            return
        left = None if self.limit is None else self.limit - fired
        floor = self._floor(after_ms)
        slots = self._cron_slots(floor) if self.cron is not None else self._interval_slots(floor)
        for count, slot in enumerate(slots):
            if left is not None and count >= left:
                return
            if slot > self._last_ms():
                return
            yield slot

    def next_slots(self, after_ms: int, count: int, fired: int = 0) -> list[int]:
        """At most ``count`` slots after ``after_ms`` (``GET`` shows the next five)."""
        return list(itertools.islice(self.slots_after(after_ms, fired), count))

    def missed(self, last_ms: int, now_ms: int, fired: int = 0) -> list[int]:
        """The slots after ``last_ms`` and up to ``now_ms`` that fire now (:meth:`catch_up`)."""
        return self.catch_up(last_ms, now_ms, fired)[0]

    def catch_up(self, last_ms: int, now_ms: int, fired: int = 0) -> tuple[list[int], int]:
        """The slots after ``last_ms`` and up to ``now_ms`` that fire now, by ``misfire``
        (the latest one with ``skip``; each, at most the latest ``MAX_CATCH_UP``, with
        ``all``), and how many slots that span held (counted up to ``MAX_COUNTED``): those
        not fired now are missed. The slots are those :meth:`slots_after` gives, with one
        exception: a cron span of more than ``MAX_COUNTED`` slots under a ``limit`` fires its
        latest slots before now even where the limit would have ended the span sooner (it
        still fires no more than the fires the limit leaves)."""
        keep = 1 if self.misfire == "skip" else MAX_CATCH_UP
        if self.cron is None:
            return self._interval_catch_up(last_ms, now_ms, fired, keep)
        due: collections.deque[int] = collections.deque(maxlen=keep)
        passed = 0
        for slot in self.slots_after(last_ms, fired):
            if slot > now_ms:
                break
            if passed == MAX_COUNTED:
                return self._latest_cron_slots(last_ms, now_ms, keep), passed
            passed += 1
            due.append(slot)
        return list(due), passed

    def _interval_catch_up(
        self, last_ms: int, now_ms: int, fired: int, keep: int
    ) -> tuple[list[int], int]:
        """:meth:`catch_up` of an interval plan, by arithmetic on the slot numbers ``k`` of
        ``anchor_ms + k * every``: the first after ``last_ms`` (as :meth:`slots_after`) and
        the last by ``now_ms``, ``end_at`` and the fires ``limit`` leaves."""
        assert self.every_s is not None
        if self.limit is not None and fired >= self.limit:
            return [], 0
        every_ms = self.every_s * 1000
        first = self._first_interval_k(self._floor(last_ms))
        last = (min(now_ms, self._last_ms()) - self.anchor_ms) // every_ms
        if self.limit is not None:
            last = min(last, first + self.limit - fired - 1)
        due = [self.anchor_ms + k * every_ms for k in range(max(first, last - keep + 1), last + 1)]
        return due, min(max(0, last - first + 1), MAX_COUNTED)

    def _latest_cron_slots(self, after_ms: int, now_ms: int, count: int) -> list[int]:
        """The latest ``count`` cron slots after ``after_ms`` and by ``now_ms`` and ``end_at``:
        the earliest of them is found backwards from the end, and they are then read
        forwards, so a time zone's transitions are handled as :meth:`slots_after` does."""
        assert self.cron is not None
        bound = min(now_ms, self._last_ms())
        zone = zoneinfo.ZoneInfo(self.timezone)
        # Reverse iteration gives the slots strictly before its start.
        end = datetime.datetime.fromtimestamp((bound + 1) / 1000, zone)
        earliest = bound
        for moment in itertools.islice(CronSim(self.cron, end, reverse=True), count):
            earliest = _epoch_ms(moment)
        latest: collections.deque[int] = collections.deque(maxlen=count)
        for slot in self._cron_slots(max(earliest - 1, self._floor(after_ms))):
            if slot > bound:
                break
            latest.append(slot)
        return list(latest)

    def _last_ms(self) -> int:
        """The latest a slot may be: ``end_at``, at most ``LATEST_SLOT_MS``."""
        return LATEST_SLOT_MS if self.end_at_ms is None else min(self.end_at_ms, LATEST_SLOT_MS)

    def _floor(self, after_ms: int) -> int:
        """What slots come strictly after: ``after_ms``, or just before ``start_at``."""
        return after_ms if self.start_at_ms is None else max(after_ms, self.start_at_ms - 1)

    def _cron_slots(self, after_ms: int) -> Iterator[int]:
        assert self.cron is not None
        zone = zoneinfo.ZoneInfo(self.timezone)
        start = datetime.datetime.fromtimestamp(after_ms / 1000, zone)
        if start >= LATEST_SLOT:
            return
        for moment in CronSim(self.cron, start):
            if moment > LATEST_SLOT:
                return
            yield _epoch_ms(moment)

    def _first_interval_k(self, after_ms: int) -> int:
        """The number ``k`` of the first interval slot ``anchor_ms + k * every`` strictly
        after ``after_ms`` (``k >= 0`` from ``start_at``, else ``k >= 1``)."""
        assert self.every_s is not None
        first_k = 0 if self.start_at_ms is not None else 1
        return max(first_k, (after_ms - self.anchor_ms) // (self.every_s * 1000) + 1)

    def _interval_slots(self, after_ms: int) -> Iterator[int]:
        assert self.every_s is not None
        every_ms = self.every_s * 1000
        k = self._first_interval_k(after_ms)
        while True:
            yield self.anchor_ms + k * every_ms
            k += 1


def parse(document: Mapping[str, Any], now_ms: int, min_interval_s: int) -> Plan:
    """The plan of a schedule written at ``now_ms`` from the body's plan fields (the
    ``PLAN_KEYS`` of ``document``), or InvalidRequest saying what is wrong."""
    cron, every = document.get("cron"), document.get("every")
    if (cron is None) == (every is None):
        raise errors.InvalidRequest('A schedule has either "cron" or "every", not both.')
    zone_name = document.get("timezone", "UTC")
    if not isinstance(zone_name, str) or zone_name not in known_zones():
        raise errors.InvalidRequest(
            f"timezone {str(zone_name)[:64]!r} is not a time zone of the IANA database, such "
            "as Europe/Paris or UTC."
        )
    if cron is not None:
        cron = _checked_cron(cron)
    elif not (is_int(every) and min_interval_s <= cast(int, every) <= MAX_EVERY_S):
        raise errors.InvalidRequest(
            f'"every" must be an integer of seconds from {min_interval_s} (the minimum '
            f"interval, [transport] min_schedule_interval) to {MAX_EVERY_S}."
        )
    start_at, end_at = _moment(document, "start_at"), _moment(document, "end_at")
    if start_at is not None and start_at > LATEST_SLOT_MS:
        raise errors.InvalidRequest("start_at must be before 9000-01-01T00:00:00Z.")
    if start_at is not None and end_at is not None and end_at <= start_at:
        raise errors.InvalidRequest("end_at must be after start_at.")
    limit = document.get("limit")
    if limit is not None and (not is_int(limit) or not 1 <= limit <= INT64_MAX):
        raise errors.InvalidRequest('"limit" must be a positive integer of fires.')
    misfire = document.get("misfire", "skip")
    if misfire not in MISFIRE_POLICIES:
        raise errors.InvalidRequest('"misfire" must be "skip" or "all".')
    plan = Plan(
        cron=cron,
        timezone=zone_name,
        every_s=every,
        start_at_ms=start_at,
        end_at_ms=end_at,
        limit=limit,
        misfire=misfire,
        anchor_ms=start_at if start_at is not None else now_ms,
    )
    _check_first_slot(plan, now_ms)
    return plan


def _check_first_slot(plan: Plan, now_ms: int) -> None:
    """InvalidRequest unless the plan has a slot after ``now_ms`` that a tick can wait for.

    The next slot is held by a tick, a stored message, which lives at most
    ``MAX_MESSAGE_TTL``: one due later would expire unfired. Only a ``start_at`` can be that
    far (no two slots of a plan are more than 40 years apart)."""
    upcoming = plan.next_slots(now_ms, 1)
    if not upcoming:
        raise errors.InvalidRequest("The plan has no slot after now: it would never fire.")
    if upcoming[0] - now_ms >= MAX_MESSAGE_TTL * 1000:
        raise errors.InvalidRequest(
            f"The plan's first slot is more than {MAX_MESSAGE_TTL} seconds (about 136 years) "
            "away, longer than a schedule can wait for a slot."
        )


def parse_checked(document: Mapping[str, Any], anchor_ms: int) -> Plan:
    """The plan of a body :func:`parse` accepted, read back from the store."""
    start_at = _moment(document, "start_at")
    return Plan(
        cron=document.get("cron"),
        timezone=document.get("timezone", "UTC"),
        every_s=document.get("every"),
        start_at_ms=start_at,
        end_at_ms=_moment(document, "end_at"),
        limit=document.get("limit"),
        misfire=document.get("misfire", "skip"),
        anchor_ms=start_at if start_at is not None else anchor_ms,
    )


@functools.cache
def known_zones() -> frozenset[str]:
    """The IANA time zone names this machine knows (its database, or the tzdata package)."""
    return frozenset(zoneinfo.available_timezones())


def _checked_cron(cron: Any) -> str:
    if not isinstance(cron, str) or len(cron) > MAX_CRON_LENGTH or len(cron.split()) != 5:
        raise errors.InvalidRequest(
            '"cron" must be a 5-field cron expression (minute hour day-of-month month '
            'day-of-week), such as "0 9 * * 1-5".'
        )
    try:
        CronSim(cron, datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC))
    except CronSimError as exc:
        raise errors.InvalidRequest(f"cron {cron!r} is not valid: {exc}.") from exc
    return " ".join(cron.split())


def _moment(document: Mapping[str, Any], key: str) -> int | None:
    value = document.get(key)
    return None if value is None else epoch_ms_of(value, f"{key} is")


def _epoch_ms(moment: datetime.datetime) -> int:
    return (moment - EPOCH) // datetime.timedelta(milliseconds=1)
