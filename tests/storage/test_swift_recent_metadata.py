"""Posts on Swift go by the queue's metadata object as their process read it at most
``metadata_cache_ms`` ago, and the writes posts must see wait that long before they answer:
two drivers stand for two server processes."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from testbed.swift_aio import SwiftAllInOne
from tests.helpers.stores import close_test_driver, open_test_driver
from tests.helpers.swift import SwiftRequests
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import Batch, NewMessage, NewSubscription, Posted, VersionedMetadata
from zaqar_delay.storage.base import metadata_version_of
from zaqar_delay.storage.swift.driver import SwiftDriver

P, Q = "project-m", "recent"
ALICE = "a" * 32
MESSAGE = NewMessage('"x"', 3600, 0)
EMPTY = metadata_version_of("{}")


@pytest.fixture
def servers(swift_aio: SwiftAllInOne) -> Iterator[tuple[SwiftDriver, SwiftDriver]]:
    """Two drivers on one Swift, as two server processes have."""
    namespace = f"t{uuid.uuid4().hex[:12]}"
    drivers = [open_test_driver(swift_aio.store_uri, namespace=namespace) for _ in range(2)]
    assert all(isinstance(d, SwiftDriver) for d in drivers)
    yield drivers[0], drivers[1]  # type: ignore[misc]
    for driver in drivers:
        close_test_driver(driver)


def post(driver: SwiftDriver, clock: FakeClock, version: str) -> Posted | VersionedMetadata:
    return driver.post_if_current(P, Q, Batch([MESSAGE], ALICE), clock.now_ms(), version)


# A period the two posts of the test below take far less than, however loaded the machine
# (the default, 250 ms, is not: on a busy machine the second post came after it).
LONG_PERIOD_MS = 1500


def test_posts_read_the_metadata_once_per_period(
    swift_aio: SwiftAllInOne, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"{swift_aio.store_uri}&metadata_cache_ms={LONG_PERIOD_MS}"
    one = open_test_driver(uri)
    assert isinstance(one, SwiftDriver)
    try:
        clock = FakeClock()
        assert one.create_queue(P, Q, {}, clock.now_ms())
        requests = SwiftRequests(monkeypatch)
        assert isinstance(post(one, clock, EMPTY), Posted)
        assert isinstance(post(one, clock, EMPTY), Posted)
        assert requests.made == {"get_object": 1, "put_object": 2}, (
            "the second post wrote its message only"
        )
    finally:
        close_test_driver(one)


def test_a_post_after_a_metadata_write_in_another_process_sees_it(
    servers: tuple[SwiftDriver, SwiftDriver],
) -> None:
    writer, poster = servers
    clock = FakeClock()
    writer.create_queue(P, Q, {}, clock.now_ms())
    assert isinstance(post(poster, clock, EMPTY), Posted), "the poster read the metadata"
    writer.set_metadata(P, Q, {"_default_message_delay": 30})
    # Within metadata_cache_ms of the poster's read, but after the write answered.
    refused = post(poster, clock, EMPTY)
    assert isinstance(refused, VersionedMetadata)
    assert refused.metadata == {"_default_message_delay": 30}


def test_a_post_after_a_first_subscription_in_another_process_owes_its_push(
    servers: tuple[SwiftDriver, SwiftDriver],
) -> None:
    subscriber, poster = servers
    clock = FakeClock()
    subscriber.create_queue(P, Q, {}, clock.now_ms())
    first = post(poster, clock, EMPTY)
    assert isinstance(first, Posted) and not first.push_due_ms, "no subscription yet"
    subscriber.create_subscription(
        P, Q, NewSubscription("http://203.0.113.5/h", 600, {}, "s"), clock.now_ms()
    )
    second = post(poster, clock, EMPTY)
    assert isinstance(second, Posted) and second.push_due_ms, "the new subscription is pushed"


def test_a_post_after_a_queue_was_deleted_in_another_process_creates_it_again(
    servers: tuple[SwiftDriver, SwiftDriver],
) -> None:
    deleter, poster = servers
    clock = FakeClock()
    deleter.create_queue(P, Q, {"_default_message_ttl": 60}, clock.now_ms())
    version = metadata_version_of(json.dumps({"_default_message_ttl": 60}))
    assert isinstance(post(poster, clock, version), Posted)
    deleter.delete_queue(P, Q)
    refused = post(poster, clock, version)
    assert isinstance(refused, VersionedMetadata) and refused.metadata == {}
    assert isinstance(post(poster, clock, refused.version), Posted)
    assert [q.name for q in deleter.list_queues(P, None, 10, False)] == [Q]
