"""Prometheus metrics of the service, correct under several gunicorn workers.

Counters and histograms are written by every worker (prometheus-client's multiprocess mode
when ``PROMETHEUS_MULTIPROC_DIR`` is set, which ``zaqar-delay-server`` does). Per-queue state
(delayed, claimed, expired) is not kept in the workers: it is read from the store when
``/metrics`` is scraped, for every queue that has seen a post or claim since the server
started, so every worker's scrape shows the same, current values.

With pooling, the per-queue state carries a ``pool`` label (the pool the queue is placed on,
and the store its state is read from), and ``zaqar_delay_pool_queues`` counts the queues each
pool holds.

Per-queue series are bounded: each process gives its own series to the first
``max_queue_series`` queues it sees and counts every later one under the labels
``project="_other", queue="_other"``, so a scrape stays small however many queues exist.
The service-wide series (lateness, request duration, responses by status) are always there,
and so is each store's clock against this server's, read at the scrape as the queue state
is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http
import os
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from zaqar_delay.clock import Clock, store_offset_ms
from zaqar_delay.conf import PROMETHEUS_MULTIPROC_ENV
from zaqar_delay.errors import StorageUnavailable
from zaqar_delay.models import Fire, Message, QueueStats
from zaqar_delay.stores import PooledStores, Stores

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Queues whose state one scrape reads from the store, at most.
MAX_SCRAPED_QUEUES = 1000
LATENESS_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
QUEUE_LABELS = ("project", "queue")
# The labels of every queue past a process's max_queue_series.
OTHER = "_other"
# The method label of requests whose method HTTP does not define.
KNOWN_METHODS = frozenset(method.value for method in http.HTTPMethod)
OTHER_METHOD = "other"
DEFAULT_MAX_QUEUE_SERIES = 100


class QueueSeries:
    """Which queues have series of their own: the first ``limit`` a process sees."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._named: set[tuple[str, str]] = set()

    def labels(self, project: str, queue: str) -> tuple[str, str]:
        key = (project, queue)
        if key in self._named:
            return key
        if len(self._named) < self._limit:
            self._named.add(key)
            return key
        return OTHER, OTHER


@dataclasses.dataclass(frozen=True, slots=True)
class _QueueCounters:
    """A queue's labelled counters."""

    posted: Counter
    deleted: Counter
    claimed: Counter
    dead_lettered: Counter


class Metrics:
    """Every metric of one worker process."""

    def __init__(
        self, stores: Stores, clock: Clock, max_queue_series: int = DEFAULT_MAX_QUEUE_SERIES
    ) -> None:
        """``stores``: where each queue's state is read at a scrape, and its pool."""
        self._stores = stores
        self._clock = clock
        self._series = QueueSeries(max_queue_series)
        self._multiprocess = bool(os.environ.get(PROMETHEUS_MULTIPROC_ENV))
        # In multiprocess mode values go to files and a fresh registry collects them per
        # scrape; otherwise (tests, plain WSGI) each app has a registry of its own.
        self._registry = None if self._multiprocess else CollectorRegistry()
        registry = self._registry
        self.posted = Counter(
            "zaqar_delay_messages_posted", "Messages posted.", QUEUE_LABELS, registry=registry
        )
        self.claimed = Counter(
            "zaqar_delay_messages_claimed",
            "Messages handed out by claims and pops.",
            QUEUE_LABELS,
            registry=registry,
        )
        self.deleted = Counter(
            "zaqar_delay_messages_deleted",
            "Messages deleted (by id, in bulk, by pop, or by a push that consumed them); "
            "a delete of a message already gone is not counted.",
            QUEUE_LABELS,
            registry=registry,
        )
        self.dead_lettered = Counter(
            "zaqar_delay_messages_dead_lettered",
            "Messages moved to a dead-letter queue.",
            QUEUE_LABELS,
            registry=registry,
        )
        self.lateness = Histogram(
            "zaqar_delay_claim_lateness_seconds",
            "Claim time minus due time of each message claimed.",
            buckets=LATENESS_BUCKETS,
            registry=registry,
        )
        self.push_attempts = Counter(
            "zaqar_delay_push_attempts",
            "Pushes to subscribers, by outcome: delivered, retry (failed, tried again later), "
            "failed (permanent or out of retries).",
            ("outcome",),
            registry=registry,
        )
        self.push_dead_lettered = Counter(
            "zaqar_delay_pushes_dead_lettered",
            "Pushes that failed for good and went to a dead-letter queue.",
            registry=registry,
        )
        self.push_lateness = Histogram(
            "zaqar_delay_push_lateness_seconds",
            "Send time minus due time of each first push attempt.",
            buckets=LATENESS_BUCKETS,
            registry=registry,
        )
        self.schedule_fires = Counter(
            "zaqar_delay_schedule_fires",
            "Messages recurring schedules posted, by schedule and whether they were late: due "
            "after their slot plus the message's delay (posted after an outage, or by a "
            "dispatcher behind).",
            (*QUEUE_LABELS, "schedule", "late"),
            registry=registry,
        )
        self.schedule_missed = Counter(
            "zaqar_delay_schedule_missed_slots",
            "Slots of recurring schedules not fired (skipped by misfire after an outage).",
            (*QUEUE_LABELS, "schedule"),
            registry=registry,
        )
        self.schedule_failed_fires = Counter(
            "zaqar_delay_schedule_failed_fires",
            "Fires of recurring schedules that failed (each is retried, at most 30 s apart): "
            "the queue refused the message, or a store failed.",
            (*QUEUE_LABELS, "schedule"),
            registry=registry,
        )
        self.request_duration = Histogram(
            "zaqar_delay_request_duration_seconds",
            "Time to answer a request, by route.",
            ("method", "route"),
            registry=registry,
        )
        self.responses = Counter(
            "zaqar_delay_responses",
            "Requests answered, by method, route and status code (refusals such as 403 and "
            "429 among them).",
            ("method", "route", "status"),
            registry=registry,
        )
        self.turn_wait = Histogram(
            "zaqar_delay_turn_wait_seconds",
            "Time requests waited for a turn at work ([server] max_active_requests), of those "
            "that waited; not part of their request durations.",
            registry=registry,
        )
        self.journal_lost = Counter(
            "zaqar_delay_journal_lost_events",
            "Events the lifecycle journal could not write (a full, read-only or failing "
            "disk); the requests were answered as usual.",
            registry=registry,
        )
        # Labelled children already looked up; as bounded as the series themselves (queues by
        # QueueSeries, requests by method and route template).
        self._queue_series: dict[tuple[str, str], _QueueCounters] = {}
        self._request_series: dict[tuple[str, str], Histogram] = {}
        self._response_series: dict[tuple[str, str, int], Counter] = {}

    def count_posted(self, project: str, queue: str, count: int) -> None:
        self._queue_counters(project, queue).posted.inc(count)

    def count_journal_lost(self, events: int) -> None:
        self.journal_lost.inc(events)

    def count_deleted(self, project: str, queue: str, count: int) -> None:
        self._queue_counters(project, queue).deleted.inc(count)

    def observe_turn_wait(self, seconds: float) -> None:
        self.turn_wait.observe(seconds)

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """One answered request: its duration by method and route template, and its count by
        those and its status code. A method HTTP does not define (the client chooses it)
        counts as "other", so series stay bounded; the service chooses every status."""
        if method not in KNOWN_METHODS:
            method = OTHER_METHOD
        child = self._request_series.get((method, route))
        if child is None:
            child = self._request_series[method, route] = self.request_duration.labels(
                method, route
            )
        child.observe(seconds)
        counted = self._response_series.get((method, route, status))
        if counted is None:
            counted = self._response_series[method, route, status] = self.responses.labels(
                method, route, str(status)
            )
        counted.inc()

    def _queue_counters(self, project: str, queue: str) -> _QueueCounters:
        # prometheus-client's labels() validates and builds its key on every call; the
        # children it returns live as long as their parent, so each is looked up once. They
        # are kept by their labels, not by queue: the queues past max_queue_series share the
        # "_other" counters, and keeping them by queue would grow the process with each.
        labels = self._series.labels(project, queue)
        counters = self._queue_series.get(labels)
        if counters is None:
            counters = self._queue_series[labels] = _QueueCounters(
                self.posted.labels(*labels),
                self.deleted.labels(*labels),
                self.claimed.labels(*labels),
                self.dead_lettered.labels(*labels),
            )
        return counters

    def queue_counters_kept(self) -> int:
        """How many queues' counters the process keeps: at most ``max_queue_series``, and
        the "_other" ones the rest share."""
        return len(self._queue_series)

    def count_fires(
        self, project: str, queue: str, schedule: str, fires: Iterable[Fire], missed: int
    ) -> None:
        """A schedule's fire: its messages (late or not) and the slots it skipped. The
        schedule's series count among the queue series (``max_queue_series``)."""
        shown = self._schedule_labels(project, queue, schedule)
        for fire in fires:
            self.schedule_fires.labels(*shown, str(fire.late).lower()).inc()
        if missed:
            self.schedule_missed.labels(*shown).inc(missed)

    def count_failed_fire(self, project: str, queue: str, schedule: str) -> None:
        """A schedule's fire that failed, in the schedule's series (:meth:`count_fires`)."""
        self.schedule_failed_fires.labels(*self._schedule_labels(project, queue, schedule)).inc()

    def _schedule_labels(self, project: str, queue: str, schedule: str) -> tuple[str, str, str]:
        """A schedule's labels, which count among the queue series (``max_queue_series``):
        "_other" each once that many are kept."""
        bounded = self._series.labels(project, f"{queue}/{schedule}") != (OTHER, OTHER)
        return (project, queue, schedule) if bounded else (OTHER, OTHER, OTHER)

    def count_dead_lettered(self, project: str, queue: str, count: int) -> None:
        self._queue_counters(project, queue).dead_lettered.inc(count)

    def observe_push(self, outcome: str, first_attempt_late_ms: int | None) -> None:
        """One push attempt; the lateness of first attempts (send time minus due time)."""
        self.push_attempts.labels(outcome).inc()
        if first_attempt_late_ms is not None:
            self.push_lateness.observe(max(0, first_attempt_late_ms) / 1000)

    def observe_claimed(self, project: str, queue: str, messages: Iterable[Message]) -> None:
        now_ms = self._clock.now_ms()
        count = 0
        for message in messages:
            self.lateness.observe(max(0, now_ms - message.due_ms) / 1000)
            count += 1
        if count:
            self._queue_counters(project, queue).claimed.inc(count)

    # -- exposition ----------------------------------------------------------------------------

    def render(self) -> bytes:
        registry = self._registry
        if registry is None:
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        families = list(registry.collect())
        read = [*self._queue_state(families), self._store_clocks()]
        return generate_latest(_Families(families + read))

    def _queue_state(self, families: list[Metric]) -> Iterator[Metric]:
        """Delayed, claimed and expired counts, read from the store for active queues."""
        queues: set[tuple[str, str]] = set()
        for family in families:
            if family.name in ("zaqar_delay_messages_posted", "zaqar_delay_messages_claimed"):
                for sample in family.samples:
                    project, queue = sample.labels.get("project"), sample.labels.get("queue")
                    if project is not None and queue is not None and queue != OTHER:
                        queues.add((project, queue))
        pooled = isinstance(self._stores, PooledStores)
        labels = (*QUEUE_LABELS, "pool") if pooled else QUEUE_LABELS
        delayed = GaugeMetricFamily(
            "zaqar_delay_queue_delayed_messages", "Messages not yet due.", labels=labels
        )
        claimed = GaugeMetricFamily(
            "zaqar_delay_queue_claimed_messages", "Messages held by a live claim.", labels=labels
        )
        expired = CounterMetricFamily(
            "zaqar_delay_queue_expired_messages",
            "Messages that expired before being deleted, as the store counted them.",
            labels=labels,
        )
        for project, queue, stats in self._read_stats(sorted(queues)[:MAX_SCRAPED_QUEUES]):
            values = [project, queue]
            if pooled:
                # A queue deleted since it was counted is placed nowhere.
                values.append(self._stores.pool_of(project, queue) or "")
            delayed.add_metric(values, stats.delayed)
            claimed.add_metric(values, stats.claimed)
            expired.add_metric(values, stats.expired)
        yield from (delayed, claimed, expired)
        if pooled:
            placed = GaugeMetricFamily(
                "zaqar_delay_pool_queues", "Queues placed on each pool.", labels=("pool",)
            )
            with contextlib.suppress(StorageUnavailable):  # the catalog's store is away
                for pool, count in sorted(self._stores.queues_per_pool().items()):
                    placed.add_metric([pool], count)
            yield placed

    def _read_stats(
        self, queues: Iterable[tuple[str, str]]
    ) -> Iterator[tuple[str, str, QueueStats]]:
        """Each queue's stats, less those of queues whose store does not answer: a scrape
        shows what it can while a store is away (when it is most looked at), and asks a
        store that did not answer no more in that scrape, each ask costing a timeout."""
        now_ms = self._clock.now_ms()
        away: set[int] = set()  # id() of the stores that did not answer
        for project, queue in queues:
            store = None
            try:
                store = self._stores.for_queue(project, queue)  # may ask the catalog
                if id(store) in away:
                    continue
                stats = store.stats(project, queue, now_ms)
            except StorageUnavailable:
                if store is not None:
                    away.add(id(store))
                continue
            yield project, queue, stats

    def _store_clocks(self) -> Metric:
        """Each store's clock against this process's, read at the scrape (a store that does
        not answer, or shows no clock, has no sample)."""
        offsets = GaugeMetricFamily(
            "zaqar_delay_store_clock_offset_seconds",
            "The store's clock minus this server's, read at the scrape. Every due time and "
            "claim expiry is read from the server's clock: a server whose clock is ahead "
            "(a negative offset) delivers messages that much early.",
            labels=("store",),
        )
        for name, driver in self._stores.named():
            try:
                offset_ms = store_offset_ms(driver.clock_ms, self._clock)
            except StorageUnavailable:
                continue
            if offset_ms is not None:
                offsets.add_metric([name], offset_ms / 1000)
        return offsets


class _Families:
    """A ready-made collection of metric families, in the shape generate_latest expects."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families
