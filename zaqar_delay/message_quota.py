"""How many messages one project may hold (``[transport] max_messages_per_project``; 0 is no
limit), held without a store call per post.

Counting a project's messages reads each of its queues (``Stores.count_messages``), so each
server process keeps a *tally* per project: the store's latest count, and the messages this
process admitted since. A post's messages are added to the tally when they are admitted,
before they are stored (concurrent posts of one project see each other's); those it then does
not store (the post is refused, or they repeat a ``dedup_id``) are given back, unless the
project was counted since (that count did not see them). The project is counted again before a
post is admitted:

* when its count is older than ``RECOUNT_AFTER_MS``, so messages consumed, deleted or expired
  meanwhile, and what other processes stored, are seen;
* when the post would take what this process admitted since past its *share* of what the
  project had left (a ``SHARE``-th of it, or all of it up to ``SLACK`` messages), though not
  past the limit: counted at once. So up to ``SHARE`` processes posting for one project at once
  pass the limit together by at most ``SLACK`` messages each (or one post each, a post that
  fits what a fresh count left being admitted whole); more pass it by a part of what was left;
* when the post would take the tally past the limit: counted again only if the count is a
  second old (``RECOUNT_AT_MOST_EVERY_MS``), refused on the count at hand otherwise;

and none of these sooner than ``COUNT_COST_FACTOR`` times as long as its last count took,
except a count past the share when that is within a second: a project of many queues (10,000
take a Redis driver a third of a second) costs a process at most a twentieth of its time,
however fast it posts, at its limit or not, and meanwhile its posts past the process's share
are refused. A project counted in a few milliseconds is counted again as its posts need. Posts
of a project arriving while it is being counted are admitted on the tally at hand rather than
counting it again.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable

from zaqar_delay import errors
from zaqar_delay.clock import Clock

RECOUNT_AFTER_MS = 5000
RECOUNT_AT_MOST_EVERY_MS = 1000
#: A project is counted again no sooner than this many times as long as its last count took.
COUNT_COST_FACTOR = 20
SHARE = 16
SLACK = 100
#: Projects a process keeps a tally for (the least recently posting forgotten first).
REMEMBERED_PROJECTS = 10_000

#: ``(project, most, now_ms)`` -> the project's messages, counted up to ``most`` at least.
Counter = Callable[[str, int, int], int]


@dataclasses.dataclass(slots=True)
class _Tally:
    counted: int  # what the store counted
    at_ms: int  # when the count began (the service clock)
    took_ms: int  # how long it took
    admitted: int = 0  # messages this process admitted since

    def rest_ms(self) -> int:
        """How long the project is not counted again, whatever its posts."""
        return COUNT_COST_FACTOR * self.took_ms

    def allows(self, adding: int, most: int) -> bool:
        left = most - self.counted
        if not self.admitted:
            return adding <= left
        return self.admitted + adding <= max(left // SHARE, min(left, SLACK))

    def within(self, adding: int, most: int) -> bool:
        return self.counted + self.admitted + adding <= most


@dataclasses.dataclass(frozen=True, slots=True)
class Admitted:
    """What a post was admitted for: ``count`` messages of ``project``, on ``tally``."""

    project: str
    tally: _Tally
    count: int


class MessageQuota:
    """Admits or refuses (QuotaExceeded, 403) the messages of a post against its project's
    limit."""

    def __init__(self, most: int, count: Counter, clock: Clock) -> None:
        self.most = most
        self._count = count
        self._clock = clock
        self._tallies: collections.OrderedDict[str, _Tally] = collections.OrderedDict()
        # Projects being counted: a post arriving meanwhile is admitted on the tally at hand,
        # so concurrent posts of a project do not count it each.
        self._counting: set[str] = set()

    def admit(self, project: str, adding: int) -> Admitted | None:
        """Add ``adding`` messages to the project's tally, and say what was added (None
        without a limit); QuotaExceeded, adding nothing, when they would take it past the
        limit."""
        if not self.most:
            return None
        now_ms = self._clock.now_ms()
        tally = self._tallies.get(project)
        if tally is None or (
            project not in self._counting and self._recount_due(tally, adding, now_ms)
        ):
            tally = self._counted(project, now_ms)
        self._tallies.move_to_end(project)
        if not tally.allows(adding, self.most):
            raise errors.QuotaExceeded(
                f"Project {project} holds about {tally.counted + tally.admitted} messages of "
                f"the {self.most} it may hold ([transport] max_messages_per_project): this "
                f"post of {adding} is refused. Delete or consume messages, or let them "
                "expire, then post again."
            )
        tally.admitted += adding
        return Admitted(project, tally, adding)

    def give_back(self, admitted: Admitted, count: int) -> None:
        """Take ``count`` of the messages ``admitted`` off the project's tally: they were not
        stored. Nothing once the project was counted since, which did not see them."""
        if self._tallies.get(admitted.project) is admitted.tally:
            admitted.tally.admitted = max(0, admitted.tally.admitted - min(count, admitted.count))

    def _counted(self, project: str, now_ms: int) -> _Tally:
        """A fresh tally of the project, from the store's count."""
        self._counting.add(project)
        try:
            counted = self._count(project, self.most, now_ms)
        finally:
            self._counting.discard(project)
        tally = _Tally(counted, now_ms, max(0, self._clock.now_ms() - now_ms))
        self._tallies[project] = tally
        if len(self._tallies) > REMEMBERED_PROJECTS:
            self._tallies.popitem(last=False)
        return tally

    def _recount_due(self, tally: _Tally, adding: int, now_ms: int) -> bool:
        age_ms, rest_ms = now_ms - tally.at_ms, tally.rest_ms()
        if age_ms < 0 or age_ms >= max(RECOUNT_AFTER_MS, rest_ms):  # or the clock was set back
            return True
        if tally.allows(adding, self.most):
            return False
        if tally.within(adding, self.most):
            # Past its share, within the limit as far as this process knows: counted at once
            # (each count lets it admit at least a share more), unless counts take long.
            return rest_ms <= RECOUNT_AT_MOST_EVERY_MS or age_ms >= rest_ms
        return age_ms >= max(RECOUNT_AT_MOST_EVERY_MS, rest_ms)
