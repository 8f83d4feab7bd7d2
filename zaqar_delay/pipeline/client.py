"""Posting prepared rows to a zaqar-delay server, from a Spark executor.

Rows are sent in posts of one queue, each within the API's size limit. A post answered 503
(or 429, or a 5xx, or not answered at all) is sent again after an exponential backoff; every
message carries a dedup id, so a post that was stored but whose answer was lost is not stored
twice. A post refused with a 4xx is split, and each message sent alone, so that only the rows
the server refuses are rejected, each with the server's reason.
"""

from __future__ import annotations

import dataclasses
import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import requests

from zaqar_delay.pipeline.rows import POST_ENVELOPE, Prepared

T = TypeVar("T")

RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
# Answers that no row can fix: the whole job stops.
FATAL_STATUSES = frozenset({401, 403})


class PostingFailed(RuntimeError):
    """The server did not take a post within the allowed attempts, or refused the job."""


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """Where and how to post: picklable, so Spark can ship it to the executors."""

    url: str
    project: str
    client_id: str = dataclasses.field(default_factory=lambda: str(uuid.uuid4()))
    token: str | None = None
    max_bytes: int = 262144
    max_messages: int = 100
    attempts: int = 8
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    timeout_s: float = 30.0

    def headers(self) -> dict[str, str]:
        headers = {
            "Client-ID": self.client_id,
            "X-Project-ID": self.project,
            "Content-Type": "application/json",
        }
        if self.token:
            headers["X-Auth-Token"] = self.token
        return headers


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one row: ``scheduled``, ``duplicate`` or ``rejected`` (with reason)."""

    status: str
    message_id: str | None = None
    reason: str | None = None


def batches(
    items: Iterable[T], max_bytes: int, max_messages: int, row_of: Callable[[T], Prepared]
) -> Iterator[list[T]]:
    """Consecutive items of one queue, at most ``max_messages`` and ``max_bytes`` of rows
    (``row_of(item)``) per post; a single row always fits (``rows.prepare`` refused larger
    ones). Lazy: a partition is never held in memory whole."""
    batch: list[T] = []
    queue = ""
    size = POST_ENVELOPE
    for item in items:
        row = row_of(item)
        row_size = row.sent_size() + 1  # and the comma between messages
        full = len(batch) >= max_messages or size + row_size > max_bytes
        if batch and (full or row.queue != queue):
            yield batch
            batch, size = [], POST_ENVELOPE
        batch.append(item)
        queue = row.queue
        size += row_size
    if batch:
        yield batch


def outcomes_of(answer: dict[str, Any]) -> list[Outcome]:
    """Per message of a 201 answer: the hrefs in request order, and the hrefs of duplicates.

    An href listed as often as it appears was remembered from before this post; one listed
    once less was stored by its first appearance here and repeated after it."""
    hrefs: list[str] = answer["resources"]
    duplicate_count: dict[str, int] = {}
    for href in answer.get("duplicates", []):
        duplicate_count[href] = duplicate_count.get(href, 0) + 1
    appearances: dict[str, int] = {}
    for href in hrefs:
        appearances[href] = appearances.get(href, 0) + 1
    seen: set[str] = set()
    outcomes = []
    for href in hrefs:
        message_id = href.rsplit("/", 1)[1]
        stored_here = duplicate_count.get(href, 0) < appearances[href]
        first = href not in seen
        seen.add(href)
        status = "scheduled" if stored_here and first else "duplicate"
        outcomes.append(Outcome(status, message_id))
    return outcomes


class Poster:
    """Posts batches for one executor, over one keep-alive session."""

    def __init__(
        self,
        target: Target,
        clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.target = target
        self.clock = clock
        self.sleep = sleep
        self.session = requests.Session()
        self.session.headers.update(target.headers())
        self.retries = 0

    def close(self) -> None:
        self.session.close()

    def post(self, batch: Sequence[Prepared]) -> list[Outcome]:
        status, answer = self._send(batch)
        if status == 201:
            return outcomes_of(answer)
        if len(batch) == 1:
            reason = str(answer.get("description") or answer.get("title") or f"HTTP {status}")
            return [Outcome("rejected", reason=reason)]
        return [outcome for row in batch for outcome in self.post([row])]

    def _send(self, batch: Sequence[Prepared]) -> tuple[int, dict[str, Any]]:
        """POST until an answer other than "try again"; PostingFailed after the attempts."""
        url = f"{self.target.url.rstrip('/')}/v2/queues/{batch[0].queue}/messages"
        delay = self.target.backoff_s
        problem = ""
        for attempt in range(self.target.attempts):
            if attempt:
                self.retries += 1
                self.sleep(delay * (0.5 + random.random() / 2))  # jitter spreads the executors
                delay = min(delay * 2, self.target.max_backoff_s)
            now_ms = self.clock()
            payload = '{"messages":[' + ",".join(r.document(now_ms) for r in batch) + "]}"
            try:
                response = self.session.post(url, data=payload, timeout=self.target.timeout_s)
            except requests.RequestException as exc:
                problem = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code in RETRIED_STATUSES:
                problem = f"HTTP {response.status_code}: {response.text[:200]}"
                continue
            if response.status_code in FATAL_STATUSES:
                raise PostingFailed(f"{url} answered {response.status_code}: {response.text}")
            try:
                return response.status_code, dict(response.json())
            except ValueError:
                return response.status_code, {"description": response.text[:200]}
        raise PostingFailed(f"{url}: no success in {self.target.attempts} attempts ({problem})")
