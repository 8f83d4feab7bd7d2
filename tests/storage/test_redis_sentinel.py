"""The Sentinel client: a Sentinel that does not answer costs one attempt (and one retry on a
connection error), then the next Sentinel is asked.

redis-py's default policy retries a Sentinel ten times with backoff; a Sentinel cut off by a
partition then held every new connection to the store for about half a minute
(tests/functional/test_partition.py shows the whole failover).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from testbed.processes import RedisSentinelGroup
from zaqar_delay.storage.redis import durability
from zaqar_delay.storage.redis.connect import RETRIES_ON_CONNECTION_ERROR
from zaqar_delay.storage.redis.sentinel import sentinel_client


class HangUpListener:
    """A TCP listener that accepts each connection and closes it at once, counting them: a
    Sentinel whose every answer is a closed connection."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.socket.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.accepted += 1
            connection.close()

    def close(self) -> None:
        self.socket.close()


@pytest.fixture
def hang_up() -> Iterator[HangUpListener]:
    listener = HangUpListener()
    yield listener
    listener.close()


def test_a_sentinel_that_hangs_up_is_tried_once_then_the_next_is_asked(
    redis_sentinel: RedisSentinelGroup, hang_up: HangUpListener
) -> None:
    sentinels = ",".join(f"{host}:{port}" for host, _, port in redis_sentinel.sentinels)
    uri = f"redis://127.0.0.1:{hang_up.port},{sentinels}?master={redis_sentinel.master}"
    client = sentinel_client(uri, 5.0)
    try:
        assert client.ping() is True
    finally:
        client.close()
    assert hang_up.accepted >= 1, "the first Sentinel was never asked"
    assert hang_up.accepted <= 1 + RETRIES_ON_CONNECTION_ERROR


@pytest.mark.parametrize(("replica_acks", "warned"), [(1, True), (2, False), (0, False)])
def test_fewer_replica_acks_than_replicas_behind_sentinel_warn_of_a_planned_failover(
    redis_sentinel: RedisSentinelGroup, replica_acks: int, warned: bool
) -> None:
    client = sentinel_client(redis_sentinel.url(), 5.0)
    try:
        replicas = client.info("replication")["connected_slaves"]
        assert replicas == 2, "the deployment the warning is about: two replicas"
        warnings = durability.check(client, replica_acks)
    finally:
        client.close()
    about = [w for w in warnings if "planned failover (SENTINEL FAILOVER)" in w]
    assert about == (
        [
            f"[storage] replica_acks = {replica_acks} with 2 replicas behind Sentinel: a planned "
            "failover (SENTINEL FAILOVER) may lose writes acknowledged while it runs, since the "
            "former primary takes writes its other replicas confirm until Sentinel demotes it; "
            "replica_acks = 2 closes this"
        ]
        if warned
        else []
    )
