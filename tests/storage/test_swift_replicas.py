"""The Swift driver's owner decisions on a cluster that keeps three copies of everything: a
create-only write settled with ``X-Newest`` reads (every replica) still has one winner, and
concurrent claims still never share a message.

The all-in-one here has three devices on its servers, one replica on each: each object write
goes to three object-server devices, the proxy answers after a quorum of two, and a plain
read is served by any one of them.
"""

from __future__ import annotations

import threading
import time

import pytest

from testbed.swift_aio import SwiftAllInOne
from tests.helpers.stores import close_test_driver, open_test_driver
from tests.helpers.swift import RACES, race
from zaqar_delay.models import ClaimTimes, NewMessage
from zaqar_delay.storage.swift.access import access_from_uri
from zaqar_delay.storage.swift.connect import SwiftClient
from zaqar_delay.storage.swift.driver import SwiftDriver

REPLICAS = 3
P, Q = "project-r", "jobs"
CLIENT = "c" * 32
MESSAGES = 60
CLAIMERS = 6

# One worker runs the module, so one three-replica all-in-one is started (under pytest-xdist).
# Every test here races writers on the three replicas.
pytestmark = [pytest.mark.xdist_group("swift-replicas"), pytest.mark.racing]


def copies_on_disk(aio: SwiftAllInOne, marker: bytes) -> int:
    """Object data files under the devices holding ``marker``."""
    return sum(
        1
        for path in (aio.directory / "srv").glob("sdb*/objects/**/*.data")
        if marker in path.read_bytes()
    )


def test_the_all_in_one_keeps_three_copies(three_replicas: SwiftAllInOne) -> None:
    client = SwiftClient(access_from_uri(three_replicas.store_uri))
    try:
        client.put_container("copies")
        marker = f"copy-{time.time_ns()}".encode()
        client.put("copies", "o", marker, "text/plain")
        assert copies_on_disk(three_replicas, marker) == REPLICAS
    finally:
        client.close()


def test_a_settled_creation_has_exactly_one_winner_across_replicas(
    three_replicas: SwiftAllInOne,
) -> None:
    winners = race(
        three_replicas,
        lambda client, container, name, body: client.create_settled(container, name, body, "x"),
    )
    assert winners == [1] * RACES


def test_concurrent_claims_never_share_a_message_across_replicas(
    three_replicas: SwiftAllInOne,
) -> None:
    driver = open_test_driver(three_replicas.store_uri, racing=True)
    assert isinstance(driver, SwiftDriver)
    try:
        now_ms = int(time.time() * 1000)
        posted: list[str] = []
        for start in range(0, MESSAGES, 10):
            batch = [NewMessage(str(i), 3600, 0) for i in range(start, start + 10)]
            posted += driver.post_messages(P, Q, batch, CLIENT, now_ms).ids
        claimed: list[str] = []
        lock = threading.Lock()

        def claimer() -> None:
            for _ in range(MESSAGES):
                now_ms = int(time.time() * 1000)
                claim = driver.create_claim(P, Q, ClaimTimes(300, 60), 5, now_ms)
                if claim is None:
                    return
                with lock:
                    claimed.extend(m.id for m in claim.messages)

        threads = [threading.Thread(target=claimer) for _ in range(CLAIMERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        claimer()  # alone: whatever concurrent claimers left (each stops at its first None)
        assert len(claimed) == len(set(claimed)), "a message was in two live claims"
        assert sorted(claimed) == sorted(posted)
    finally:
        close_test_driver(driver)
