"""Swift driver helpers: counting a client's requests and the creations Swift accepted, and
racing attempts and queue creations."""

from __future__ import annotations

import collections
import json
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from testbed.swift_aio import SwiftAllInOne
from zaqar_delay.models import Metadata
from zaqar_delay.storage.swift.access import SwiftAccess, access_from_uri
from zaqar_delay.storage.swift.connect import SwiftClient
from zaqar_delay.storage.swift.driver import SwiftDriver

RACERS = 8


class SwiftRequests:
    """Counts the Swift requests every driver's client makes, by client method."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made: collections.Counter[str] = collections.Counter()
        call = SwiftClient._call

        def counted(client: SwiftClient, method: str, *args: Any, **kwargs: Any) -> Any:
            self.made[method] += 1
            return call(client, method, *args, **kwargs)

        monkeypatch.setattr(SwiftClient, "_call", counted)


class CreationsSeen(SwiftClient):
    """The client, counting by object name the create-only writes Swift accepted (more than
    one for a name: concurrent creations that all passed Swift's check)."""

    def __init__(self, access: SwiftAccess, accepted: collections.Counter[str]) -> None:
        super().__init__(access)
        self._accepted = accepted
        self._counting = threading.Lock()

    def create(self, container: str, name: str, *args: Any, **kwargs: Any) -> bool:
        created = super().create(container, name, *args, **kwargs)
        if created:
            with self._counting:
                self._accepted[name] += 1
        return created


def create_queue_at_once(
    drivers: Sequence[SwiftDriver], project: str, queue: str, metadata: Sequence[Metadata]
) -> list[bool]:
    """Each driver PUTs ``queue`` with its ``metadata`` at the same moment (threads released
    together); whether each said it created the queue, in the drivers' order."""
    start = threading.Barrier(len(drivers))
    answers: list[bool | None] = [None] * len(drivers)

    def put(index: int) -> None:
        start.wait()
        now_ms = int(time.time() * 1000)
        answers[index] = drivers[index].create_queue(project, queue, metadata[index], now_ms)

    threads = [threading.Thread(target=put, args=(i,)) for i in range(len(drivers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert None not in answers, "a PUT never answered"
    return [bool(answer) for answer in answers]


RACES = 20


def race(swift_aio: SwiftAllInOne, attempt: Any) -> list[int]:
    """``attempt(client, name, body)`` by RACERS threads at once on one new object name, RACES
    times; how many of them said they won, each time."""
    clients = [SwiftClient(access_from_uri(swift_aio.store_uri)) for _ in range(RACERS)]
    container = f"race-{uuid.uuid4().hex[:8]}"
    clients[0].put_container(container)
    winners = []
    try:
        for round_number in range(RACES):
            winners.append(one_race(clients, container, f"o{round_number}", attempt))
    finally:
        for client in clients:
            client.close()
    return winners


def one_race(clients: list[SwiftClient], container: str, name: str, attempt: Any) -> int:
    barrier = threading.Barrier(len(clients))
    won: list[bool] = []

    def run(client: SwiftClient) -> None:
        client.ping()  # authenticated before the start
        barrier.wait()
        body = json.dumps({"racer": uuid.uuid4().hex}).encode()
        won.append(attempt(client, container, name, body))

    threads = [threading.Thread(target=run, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(won) == len(clients)
    return sum(won)
