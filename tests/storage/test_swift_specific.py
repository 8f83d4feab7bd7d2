"""What the Swift driver's design stands on, and its answers to faults, on a Swift all-in-one:
create-only writes race (so owners are settled), a post is committed by one object, and an
index entry a claimer left behind is repaired, not dropped."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any
from unittest.mock import ANY

import pytest
from swiftclient.exceptions import ClientException

from testbed.keystone_standin import KeystoneStandIn
from testbed.swift_aio import SwiftAllInOne
from tests.helpers.stores import close_test_driver, open_test_driver
from tests.helpers.swift import RACERS, RACES, race
from zaqar_delay import errors
from zaqar_delay.clock import FakeClock
from zaqar_delay.conf import Settings, StorageSettings, SwiftSettings
from zaqar_delay.models import (
    Batch,
    ClaimTimes,
    LeaseRequest,
    ListQuery,
    NewMessage,
    NewSubscription,
    OverLimit,
    Posted,
    Settlement,
    VersionedMetadata,
)
from zaqar_delay.storage.base import metadata_version_of
from zaqar_delay.storage.swift import connect, names
from zaqar_delay.storage.swift.access import access_from_uri
from zaqar_delay.storage.swift.connect import ConcurrentUpdate, SwiftClient
from zaqar_delay.storage.swift.driver import SwiftDriver
from zaqar_delay.storage.swift.messages import MessageOps
from zaqar_delay.storage.swift.push_limits import PushLimitOps
from zaqar_delay.storage.swift.slots import Slot
from zaqar_delay.storage.swift.timing import LEASE_TAKER_GRACE_MS, TAKER_GRACE_MS
from zaqar_delay.storage.uri import open_driver

# The Swift driver's own races: its drivers settle as racing tests' do.
pytestmark = pytest.mark.racing

P, Q = "project-s", "jobs"
ALICE = "a" * 32


def test_if_none_match_lets_concurrent_creations_all_succeed(swift_aio: SwiftAllInOne) -> None:
    """Why create_settled exists: each object server checks that the object is absent before
    the data arrives, so creations that start together all get 201."""
    winners = race(
        swift_aio, lambda client, container, name, body: client.create(container, name, body, "x")
    )
    assert all(count >= 1 for count in winners)
    assert max(winners) > 1, winners


def test_a_settled_creation_has_exactly_one_winner(swift_aio: SwiftAllInOne) -> None:
    winners = race(
        swift_aio,
        lambda client, container, name, body: client.create_settled(container, name, body, "x"),
    )
    assert winners == [1] * RACES


class ProcessKilled(BaseException):
    """The process dying mid-call: nothing after the call runs, not even an undo."""


class FailingWrites:
    """Makes the driver's client refuse writes (PUTs, metadata POSTs and deletes) of objects
    whose names contain ``part`` with ``fault`` (by default, as Swift going away would), and
    records each refusal."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        part: str,
        fault: type[BaseException] = errors.StorageUnavailable,
        deletes: bool = True,
    ) -> None:
        """``deletes``: deletes are refused too."""
        self.refused: list[str] = []
        put, delete = SwiftClient.put, SwiftClient.delete
        post = SwiftClient.set_user_metadata

        def failing_put(client: SwiftClient, container: str, name: str, *args: Any) -> None:
            if part in name:
                self.refused.append(f"PUT {name}")
                raise fault("injected")
            put(client, container, name, *args)

        def failing_delete(client: SwiftClient, container: str, name: str) -> None:
            if part in name and deletes:
                self.refused.append(f"DELETE {name}")
                raise fault("injected")
            delete(client, container, name)

        def failing_post(client: SwiftClient, container: str, name: str, *args: Any) -> None:
            if part in name:
                self.refused.append(f"POST {name}")
                raise fault("injected")
            post(client, container, name, *args)

        monkeypatch.setattr(SwiftClient, "put", failing_put)
        monkeypatch.setattr(SwiftClient, "set_user_metadata", failing_post)
        monkeypatch.setattr(SwiftClient, "delete", failing_delete)


def test_a_post_whose_commit_failed_is_never_seen_in_part(
    swift: SwiftDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    swift.post_messages(P, Q, [NewMessage('"before"', 3600, 0)], ALICE, clock.now_ms())
    # The commit object can be neither written nor deleted, as when Swift goes away mid-post;
    # the messages themselves are written, and the undo cannot remove them.
    faults = FailingWrites(monkeypatch, "/b/")
    messages = [NewMessage(json.dumps(i), 3600, 0) for i in range(5)]
    with pytest.raises(errors.StorageUnavailable):
        swift.post_messages(P, Q, messages, ALICE, clock.now_ms())
    assert faults.refused[0].startswith("PUT ") and "/b/" in faults.refused[0]
    prefix = names.queue_prefix(P, Q)
    stored = [
        e["name"]
        for e in swift._swift.listing(swift._container(names.MESSAGES), prefix)
        if "/" not in e["name"][len(prefix) :]
    ]
    assert len(stored) == 6, "the five messages of the cut-off post are in Swift"
    now = clock.now_ms()
    listed = swift.list_messages(
        P,
        Q,
        ListQuery(
            marker=None,
            limit=20,
            client_id="b" * 32,
            echo=True,
            include_claimed=True,
            include_delayed=True,
        ),
        now,
    )
    assert [m.body for m in listed.messages] == ["before"]
    assert swift.stats(P, Q, now).total == 1
    claim = swift.create_claim(P, Q, ClaimTimes(60, 60), 10, now)
    assert claim is not None and [m.body for m in claim.messages] == ["before"]
    cut_off = [name[len(prefix) :] for name in stored]
    assert [m.body for m in swift.get_messages(P, Q, cut_off, now)] == ["before"]


def test_a_claimer_that_died_after_taking_a_slot_leaves_the_message_to_come_back(
    swift: SwiftDriver,
) -> None:
    clock = FakeClock()
    [mid] = swift.post_messages(P, Q, [NewMessage('"x"', 3600, 0)], ALICE, clock.now_ms()).ids
    # A claimer takes the message's first slot, then dies before it indexes the claim.
    dead = Slot(1, 1, "d" * 32, clock.now_ms() + 30_000)
    assert swift._take_slot(P, Q, mid, dead)
    assert index_kinds(swift) == [], "it is indexed by nothing"
    assert is_named(swift, mid), "it is still claimable by its name"
    # The next claim meets it, finds the slot taken, and indexes the claim instead.
    assert swift.create_claim(P, Q, ClaimTimes(60, 60), 10, clock.now_ms()) is None
    assert index_kinds(swift) == ["c"]
    assert not is_named(swift, mid)
    clock.advance(seconds=29)
    assert swift.create_claim(P, Q, ClaimTimes(60, 60), 10, clock.now_ms()) is None
    clock.advance(seconds=1)
    claim = swift.create_claim(P, Q, ClaimTimes(60, 60), 10, clock.now_ms())
    assert claim is not None and [(m.id, m.claim_count) for m in claim.messages] == [(mid, 2)]


def test_a_slot_taken_just_now_is_left_to_its_taker_then_repaired(swift: SwiftDriver) -> None:
    """A claimer that loses a message's slot to a claim taken moments ago leaves the index to
    that claim's claimer for TAKER_GRACE_MS; after that it indexes the claim itself (its
    claimer died), and the message comes back when that claim lapses."""
    clock = FakeClock()
    [mid] = swift.post_messages(P, Q, [NewMessage('"x"', 3600, 0)], ALICE, clock.now_ms()).ids
    taker = Slot(1, 1, "d" * 32, clock.now_ms() + 30_000, taken_ms=clock.now_ms())
    assert swift._take_slot(P, Q, mid, taker)

    clock.advance(ms=TAKER_GRACE_MS - 1)
    assert swift.create_claim(P, Q, ClaimTimes(60, 60), 10, clock.now_ms()) is None
    assert index_kinds(swift) == [], "the taker's claim was not indexed for it"
    assert is_named(swift, mid)
    clock.advance(ms=1)
    assert swift.create_claim(P, Q, ClaimTimes(60, 60), 10, clock.now_ms()) is None
    assert index_kinds(swift) == ["c"]
    assert not is_named(swift, mid)
    clock.advance(seconds=20)
    claim = swift.create_claim(P, Q, ClaimTimes(60, 60), 10, clock.now_ms())
    assert claim is not None and [(m.id, m.claim_count) for m in claim.messages] == [(mid, 2)]


def test_a_slot_taken_before_its_message_is_written_is_given_back(swift: SwiftDriver) -> None:
    """A dead-letter copy's due entry is written before the message. A claimer that takes
    the slot in between finds no message, and deletes the slot again: when the message is
    written, the next claim takes it as its first claim."""
    clock = FakeClock()
    [mid] = names.new_ids([clock.now_ms()])
    doc = MessageOps._document(NewMessage('"late"', 3600, 0), ALICE, clock.now_ms())
    swift._write_due_entry(P, Q, mid, doc, Slot())
    assert swift.create_claim(P, Q, ClaimTimes(60, 60), 10, clock.now_ms()) is None
    assert swift._read_slot(P, Q, mid, 1) is None
    swift._write_message(P, Q, mid, doc)
    claim = swift.create_claim(P, Q, ClaimTimes(60, 60), 10, clock.now_ms())
    assert claim is not None and [(m.id, m.claim_count) for m in claim.messages] == [(mid, 1)]


def index_kinds(swift: SwiftDriver) -> list[str]:
    """The kinds of the queue's index entries (``d``, ``c``), in name order."""
    entries = swift._swift.listing(swift._container(names.INDEX), names.queue_prefix(P, Q))
    return [e["name"].split("/")[-3] for e in entries]


def is_named(swift: SwiftDriver, message_id: str) -> bool:
    """Whether the message is listed as claimable by its name."""
    [entry] = swift._swift.listing(
        swift._container(names.MESSAGES), names.queue_prefix(P, Q) + message_id
    )
    return names.fields_of(entry["content_type"]).get("i") == "1"


def slot_objects(swift: SwiftDriver) -> list[str]:
    prefix = f"{names.queue_prefix(P, Q)}m/"
    return [e["name"] for e in swift._swift.listing(swift._container(names.CLAIMS), prefix)]


def test_a_message_leaves_no_claim_slots_behind(swift: SwiftDriver) -> None:
    """Consumed, popped, dead-lettered or expired, a message's claim slots go with it."""
    clock = FakeClock()
    messages = [NewMessage(str(i), 3600, 0) for i in range(4)]
    ids = swift.post_messages(P, Q, messages, ALICE, clock.now_ms()).ids
    first = swift.create_claim(P, Q, ClaimTimes(60, 60), 2, clock.now_ms())
    assert first is not None
    clock.advance(seconds=61)  # the first claim lapses: its messages are claimed again
    claim = swift.create_claim(P, Q, ClaimTimes(60, 60), 3, clock.now_ms())
    assert claim is not None and len(claim.messages) == 3
    assert len(slot_objects(swift)) == 5, "two messages claimed twice, one once"
    for message in claim.messages:
        swift.delete_message(P, Q, message.id, claim.id, clock.now_ms())
    assert [m.id for m in swift.pop_messages(P, Q, 1, clock.now_ms())] == [ids[3]]
    assert slot_objects(swift) == []
    # Expired while claimed: removed, with its slot, by the claim that meets it.
    [short] = swift.post_messages(P, Q, [NewMessage('"s"', 60, 0)], ALICE, clock.now_ms()).ids
    assert swift.create_claim(P, Q, ClaimTimes(60, 0), 1, clock.now_ms())
    clock.advance(seconds=61)
    assert swift.create_claim(P, Q, ClaimTimes(60, 0), 1, clock.now_ms()) is None
    assert swift.get_messages(P, Q, [short], clock.now_ms()) == []
    assert slot_objects(swift) == []


def test_a_dead_lettered_message_leaves_no_index_entry_or_slot_behind(swift: SwiftDriver) -> None:
    """A claim takes a message over the limit through a slot without indexing it as
    claimed: moved to the dead-letter queue, its due entry and slots go with it."""
    clock = FakeClock()
    metadata = {"_max_claim_count": 1, "_dead_letter_queue": "dlq"}
    swift.create_queue(P, Q, metadata, clock.now_ms())
    [mid] = swift.post_messages(P, Q, [NewMessage('"x"', 3600, 0)], ALICE, clock.now_ms()).ids
    assert swift.create_claim(P, Q, ClaimTimes(60, 60), 1, clock.now_ms())
    clock.advance(seconds=61)  # the claim lapses: the message is indexed as due again
    outcome = swift.claim(P, Q, ClaimTimes(60, 60), 1, clock.now_ms())
    assert outcome.over_limit is not None and outcome.over_limit.ids == (mid,)
    assert index_kinds(swift) == ["d"]
    assert len(slot_objects(swift)) == 2
    swift.move_dead_letters(P, Q, outcome.over_limit, clock.now_ms())
    assert index_kinds(swift) == []
    assert slot_objects(swift) == []
    assert [m.id for m in swift.get_messages(P, "dlq", [mid], clock.now_ms())] == [mid]


def test_keystone_v3_finds_swift_in_the_catalog_by_region_and_interface(
    swift_aio: SwiftAllInOne,
) -> None:
    """auth_url on Keystone v3: the user and project in their domains, the object-store
    endpoint of the configured region and interface (the others point nowhere)."""
    found = swift_aio.token()
    assert found is not None
    storage_url = found[0]
    nowhere = "http://127.0.0.1:9/v1/AUTH_test"
    keystone = KeystoneStandIn(
        {"demo": "s3cret"},
        token=lambda: swift_aio.token()[1],  # type: ignore[index]
        endpoints=[
            {"interface": "public", "region": "RegionOne", "url": nowhere},
            {"interface": "internal", "region": "RegionOne", "url": nowhere},
            {"interface": "public", "region": "RegionTwo", "url": nowhere},
            {"interface": "internal", "region": "RegionTwo", "url": storage_url},
        ],
    ).start()
    settings = Settings(
        storage=StorageSettings(key_prefix=f"t{uuid.uuid4().hex[:12]}"),
        swift=SwiftSettings(
            auth_url=keystone.url,
            user_domain_name="users",
            project_domain_id="d0",
            region_name="RegionTwo",
            interface="internal",
        ),
    )
    driver = open_driver("swift://demo:s3cret@/demo-project", settings)
    refused = open_driver("swift://demo:wrong@/demo-project", settings)
    try:
        assert driver.ping()
        driver.prepare()
        clock = FakeClock()
        [mid] = driver.post_messages(P, Q, [NewMessage('"x"', 60, 0)], ALICE, clock.now_ms()).ids
        claim = driver.create_claim(P, Q, ClaimTimes(60, 0), 1, clock.now_ms())
        assert claim is not None and [m.id for m in claim.messages] == [mid]
        # Keystone refuses the password: the store is unavailable (503), never a 500.
        assert not refused.ping()
        with pytest.raises(errors.StorageUnavailable, match="Swift is unavailable"):
            refused.get_metadata(P, Q)
    finally:
        driver.close()
        refused.close()
        keystone.stop()
    auth = keystone.requests[0]["auth"]
    assert auth["identity"]["password"]["user"]["domain"] == {"name": "users"}
    assert auth["scope"]["project"] == {"name": "demo-project", "domain": {"id": "d0"}}


def subscribed_mark(swift: SwiftDriver) -> str | None:
    headers = swift._swift.head(swift._container(names.QUEUES), names.queue_object(P, Q))
    assert headers is not None
    return headers.get(names.SUBSCRIBED.lower())


class ListedPrefixes:
    """The prefixes the driver lists, recorded (wrapping its client's ``listing``)."""

    def __init__(self, swift: SwiftDriver, monkeypatch: pytest.MonkeyPatch) -> None:
        self.prefixes: list[str] = []
        real = swift._swift.listing

        def listing(container: str, prefix: str, **kwargs: Any) -> list[dict[str, Any]]:
            self.prefixes.append(prefix)
            return real(container, prefix, **kwargs)

        monkeypatch.setattr(swift._swift, "listing", listing)

    def subscription_lookups(self) -> int:
        return sum(1 for prefix in self.prefixes if prefix.endswith("/s/"))


def test_a_post_looks_for_subscriptions_only_once_the_queue_may_have_some(
    swift: SwiftDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    assert swift.create_queue(P, Q, {}, clock.now_ms())
    assert subscribed_mark(swift) == "0"
    listed = ListedPrefixes(swift, monkeypatch)
    version = metadata_version_of(json.dumps({}))
    message = NewMessage('"x"', 3600, 0)
    posted = swift.post_if_current(P, Q, Batch([message], ALICE), clock.now_ms(), version)
    assert isinstance(posted, Posted), "the version is current"
    assert not posted.push_due_ms and listed.subscription_lookups() == 0
    swift.create_subscription(
        P, Q, NewSubscription("http://203.0.113.5/h", 600, {}, "s"), clock.now_ms()
    )
    assert subscribed_mark(swift) == "1"
    posted = swift.post_if_current(P, Q, Batch([message], ALICE), clock.now_ms(), version)
    assert isinstance(posted, Posted)
    assert listed.subscription_lookups() == 1 and posted.push_due_ms
    # A metadata write keeps the mark.
    swift.set_metadata(P, Q, {"_default_message_ttl": 60})
    assert subscribed_mark(swift) == "1"


def test_a_metadata_write_that_undid_the_mark_of_a_new_subscription_restores_it(
    swift: SwiftDriver,
) -> None:
    clock = FakeClock()
    assert swift.create_queue(P, Q, {}, clock.now_ms())
    # The race: a metadata write read the queue unmarked, a subscription then marked it and
    # was stored, and the write landed with the old mark.
    swift.create_subscription(
        P, Q, NewSubscription("http://203.0.113.5/h", 600, {}, "s"), clock.now_ms()
    )
    container, name = swift._container(names.QUEUES), names.queue_object(P, Q)
    swift._swift.put(container, name, b"{}", names.CONTENT_TYPE, {names.SUBSCRIBED: "0"})
    assert subscribed_mark(swift) == "0", "the mark was undone"
    # The write's own check after it: it finds the subscription and marks the queue again.
    swift.set_metadata(P, Q, {"_default_message_ttl": 60})
    assert subscribed_mark(swift) == "1"


def test_a_subscription_restores_a_mark_a_metadata_write_undid_meanwhile(
    swift: SwiftDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    assert swift.create_queue(P, Q, {}, clock.now_ms())
    container, name = swift._container(names.QUEUES), names.queue_object(P, Q)
    real = swift._write_subscription

    def metadata_written_meanwhile(*args: Any) -> None:
        # A metadata write that read the queue before the mark lands now.
        swift._swift.put(container, name, b"{}", names.CONTENT_TYPE, {names.SUBSCRIBED: "0"})
        assert subscribed_mark(swift) == "0", "the mark was undone"
        real(*args)

    monkeypatch.setattr(swift, "_write_subscription", metadata_written_meanwhile)
    swift.create_subscription(
        P, Q, NewSubscription("http://203.0.113.5/h", 600, {}, "s"), clock.now_ms()
    )
    assert subscribed_mark(swift) == "1"


@pytest.mark.parametrize("made_again_by", ["post", "PUT"])
def test_a_subscription_made_while_its_queue_is_deleted_is_pushed_to(
    swift: SwiftDriver, monkeypatch: pytest.MonkeyPatch, made_again_by: str
) -> None:
    """The creation marks the queue, then a deletion of the queue removes its subscriptions
    and its object, then the subscription is stored: no object is left to mark. Before, the
    queue made again (by a post, or a PUT) was unmarked, and posts to it looked for no
    subscription: the subscription, listed, was never pushed to."""
    clock = FakeClock()
    assert swift.create_queue(P, Q, {}, clock.now_ms())
    real = swift._write_subscription

    def queue_deleted_meanwhile(*args: Any) -> None:
        swift.delete_queue(P, Q)
        real(*args)

    monkeypatch.setattr(swift, "_write_subscription", queue_deleted_meanwhile)
    made, created = swift.create_subscription(
        P, Q, NewSubscription("http://203.0.113.5/h", 600, {}, "s"), clock.now_ms()
    )
    assert created
    queues = swift._container(names.QUEUES)
    assert swift._swift.head(queues, names.queue_object(P, Q)) is None, "it was not deleted"
    assert [s.id for s in swift.list_subscriptions(P, Q, None, 10, clock.now_ms())] == [made]

    if made_again_by == "PUT":
        assert swift.create_queue(P, Q, {}, clock.now_ms())
    version, posted = metadata_version_of(None), []
    for i in range(2):  # as the service posts: by the metadata version it last read
        batch = Batch([NewMessage(f'"{i}"', 3600, 0)], ALICE)
        outcome = swift.post_if_current(P, Q, batch, clock.now_ms(), version)
        if isinstance(outcome, VersionedMetadata):
            version = outcome.version
            outcome = swift.post_if_current(P, Q, batch, clock.now_ms(), version)
        assert isinstance(outcome, Posted), "the version is current"
        posted += outcome.ids

    leased = swift.lease_pushes(P, Q, LeaseRequest(clock.now_ms(), 30_000, 10))
    assert sorted(d.message.id for d in leased) == sorted(posted)
    assert subscribed_mark(swift) == "1"


def test_a_queue_stored_without_the_mark_is_looked_up_for_subscriptions(
    swift: SwiftDriver,
) -> None:
    container, name = swift._container(names.QUEUES), names.queue_object(P, Q)
    swift._swift.put(container, name, b"{}", names.CONTENT_TYPE)
    assert swift._queue_object(P, Q) == ("{}", True)


def test_concurrent_marks_of_a_queue_overtaken_by_each_other_all_succeed(
    swift: SwiftDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Swift refuses (409) an update of an object that a newer one overtook: concurrent
    subscriptions marking their queue meet that, and read the mark instead of failing."""
    clock = FakeClock()
    assert swift.create_queue(P, Q, {}, clock.now_ms())
    overtaken: list[str] = []
    real = SwiftClient.set_user_metadata

    def counted(client: SwiftClient, *args: Any) -> None:
        try:
            real(client, *args)
        except ConcurrentUpdate:
            overtaken.append(args[1])
            raise

    monkeypatch.setattr(SwiftClient, "set_user_metadata", counted)
    clients = [
        SwiftDriver(SwiftClient(swift._swift._access), swift._namespace) for _ in range(RACERS)
    ]
    try:
        for _ in range(RACES):
            swift._swift.put(
                swift._container(names.QUEUES),
                names.queue_object(P, Q),
                b"{}",
                names.CONTENT_TYPE,
                {names.SUBSCRIBED: "0"},
            )
            failures = at_once(clients, lambda driver, _: driver._mark_subscribed(P, Q))
            assert failures == []
            assert subscribed_mark(swift) == "1"
        assert overtaken, "no mark was overtaken: the race did not happen"
    finally:
        for driver in clients:
            driver.close()


@pytest.fixture
def refused_as_overtaken(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The methods of the requests Swift refused as overtaken (409), as they are refused."""
    refused: list[str] = []
    real = SwiftClient._call

    def recorded(client: SwiftClient, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return real(client, method, *args, **kwargs)
        except ClientException as exc:
            if exc.http_status == 409:
                refused.append(method)
            raise

    monkeypatch.setattr(SwiftClient, "_call", recorded)
    return refused


def written_by_a_proxy_ahead(client: SwiftClient, container: str, name: str) -> None:
    """Write ``container/name`` as a proxy whose clock is 0.5 s ahead would (the all-in-one's
    proxy keeps a client's ``X-Timestamp``, as proxies keep their peers')."""
    ahead = f"{time.time() + 0.5:016.5f}"  # Swift's form of a timestamp
    client._call("put_object", container, name, b"ahead", headers={"X-Timestamp": ahead})


def test_an_overwrite_older_than_the_object_is_accepted_and_not_kept(
    swift_aio: SwiftAllInOne,
) -> None:
    """What ``SwiftClient.put`` stands on: an overwrite that a concurrent one overtook is not
    refused, it is ordered first and so overwritten."""
    client = SwiftClient(access_from_uri(swift_aio.store_uri))
    try:
        client.put_container("overtaken")
        written_by_a_proxy_ahead(client, "overtaken", "o")
        answer: dict[str, Any] = {}
        client._call("put_object", "overtaken", "o", b"older", response_dict=answer)
        assert answer["status"] == 202
        client.put("overtaken", "o", b"older", "x")
        assert client.get("overtaken", "o", newest=True) == (ANY, b"ahead")
    finally:
        client.close()


def test_a_delete_overtaken_by_a_newer_write_is_sent_again(
    swift_aio: SwiftAllInOne, refused_as_overtaken: list[str]
) -> None:
    """Before, it answered 503."""
    client = SwiftClient(access_from_uri(swift_aio.store_uri))
    try:
        client.put_container("overtaken")
        written_by_a_proxy_ahead(client, "overtaken", "d")
        with pytest.raises(ClientException) as refused:
            client._call("delete_object", "overtaken", "d")
        assert refused.value.http_status == 409
        client.delete("overtaken", "d")
        assert refused_as_overtaken.count("delete_object") > 1, "the delete was never refused"
        assert client.get("overtaken", "d", newest=True) is None
    finally:
        client.close()


def at_once(
    drivers: list[SwiftDriver], act: Callable[[SwiftDriver, int], object]
) -> list[BaseException]:
    """``act(driver, i)`` for each driver, in a thread each, started together; what they
    raised."""
    barrier = threading.Barrier(len(drivers))
    failures: list[BaseException] = []

    def run(driver: SwiftDriver, i: int) -> None:
        driver._swift.ping()  # authenticated before the start
        barrier.wait()
        try:
            act(driver, i)
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(d, i)) for i, d in enumerate(drivers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return failures


class DispatcherKilled(Exception):
    """Stands for a kill -9 of the dispatcher at that point."""


def test_a_push_whose_lease_taker_died_before_moving_it_is_sent_when_that_lease_ends(
    swift: SwiftDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the next dispatcher found the lease taken and dropped the push: it was never
    sent."""
    clock = FakeClock()
    sid, _ = swift.create_subscription(
        P, Q, NewSubscription("http://127.0.0.1:9/x", 3600, {}, "s"), clock.now_ms()
    )
    [mid] = swift.post_messages(P, Q, [NewMessage('"x"', 3600, 0)], ALICE, clock.now_ms()).ids
    push_id, due_ms, lease_ms = f"{sid}:{mid}", clock.now_ms(), 30_000

    def killed(*_: Any) -> None:
        raise DispatcherKilled

    with monkeypatch.context() as patched:
        patched.setattr(SwiftDriver, "_move_owed", killed)
        with pytest.raises(DispatcherKilled):
            swift.lease_pushes(P, Q, LeaseRequest(clock.now_ms(), lease_ms, 10))
    container = swift._container(names.PUSHES)
    assert swift._swift.exists(container, swift._lease_name(P, Q, push_id, 1)), "no lease taken"
    assert swift.next_push_ms() == due_ms, "the push was moved before the kill"

    assert swift.lease_pushes(P, Q, LeaseRequest(clock.now_ms(), lease_ms, 10)) == []
    assert swift.next_push_ms() == due_ms, "left to the lease's taker, still owed"
    clock.advance(ms=LEASE_TAKER_GRACE_MS)
    assert swift.lease_pushes(P, Q, LeaseRequest(clock.now_ms(), lease_ms, 10)) == []
    assert swift.next_push_ms() == due_ms + lease_ms, "moved to the end of the taker's lease"
    clock.advance(ms=lease_ms - LEASE_TAKER_GRACE_MS)
    [delivery] = swift.lease_pushes(P, Q, LeaseRequest(clock.now_ms(), lease_ms, 10))
    assert delivery.id == push_id and delivery.message.id == mid
    swift.settle_pushes(P, Q, Settlement([(delivery, None)]), clock.now_ms())
    assert swift.next_push_ms() is None


def test_a_push_whose_lease_was_just_taken_elsewhere_is_left_to_its_taker(
    swift: SwiftDriver, swift_aio: SwiftAllInOne
) -> None:
    """Two dispatchers racing for one push: the one that loses writes nothing, and the push
    is sent once."""
    clock = FakeClock()
    swift.create_subscription(
        P, Q, NewSubscription("http://127.0.0.1:9/x", 3600, {}, "s"), clock.now_ms()
    )
    swift.post_messages(P, Q, [NewMessage('"x"', 3600, 0)], ALICE, clock.now_ms())
    other = open_test_driver(swift_aio.store_uri, namespace=swift._namespace, racing=True)
    try:
        leased: list[list[Any]] = []
        failures = at_once(
            [swift, other],  # type: ignore[list-item]
            lambda driver, _: leased.append(
                driver.lease_pushes(P, Q, LeaseRequest(clock.now_ms(), 30_000, 10))
            ),
        )
        assert failures == []
        assert sorted(len(found) for found in leased) == [0, 1]
        [delivery] = [d for found in leased for d in found]
        swift.settle_pushes(P, Q, Settlement([(delivery, None)]), clock.now_ms())
        assert swift.next_push_ms() is None
        clock.advance(ms=LEASE_TAKER_GRACE_MS + 30_000)
        assert swift.lease_pushes(P, Q, LeaseRequest(clock.now_ms(), 30_000, 10)) == []
    finally:
        close_test_driver(other)


def test_a_repeat_of_a_post_refused_before_its_dedup_id_was_forgotten_is_stored(
    swift: SwiftDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Swift went away mid-post: the message was not stored, and its dedup id could not be
    forgotten. Before, a repeat was answered with the id of the message never stored."""
    clock = FakeClock()
    post = [NewMessage('"once"', 3600, 0, "job-1")]
    with monkeypatch.context() as patched:
        # The message's name begins with its due time, now.
        entries = FailingWrites(patched, names.queue_prefix(P, Q) + names.time_part(clock.now_ms()))
        generations = FailingWrites(patched, names.dedup_key("job-1"))
        with pytest.raises(errors.StorageUnavailable):
            swift.post_messages(P, Q, post, ALICE, clock.now_ms())
    assert entries.refused[0].startswith("PUT "), "the message was stored"
    assert generations.refused, "the dedup id was forgotten"

    clock.advance(ms=swift._dedup.dead_after_ms)  # past the time its post could still be storing it
    stored = swift.post_messages(P, Q, post, ALICE, clock.now_ms())
    assert stored.duplicates == ()
    [message] = swift.get_messages(P, Q, stored.ids, clock.now_ms())
    assert message.body == "once"
    repeat = swift.post_messages(P, Q, post, ALICE, clock.now_ms())
    assert (repeat.ids, repeat.duplicates) == (stored.ids, (0,))


def leased_now(swift: SwiftDriver, clock: FakeClock) -> list[str]:
    """The ids of the messages whose pushes are due now, leased."""
    return [
        d.message.id for d in swift.lease_pushes(P, Q, LeaseRequest(clock.now_ms(), 30_000, 10))
    ]


def test_a_post_whose_pushes_could_not_be_owed_is_refused_whole(
    swift: SwiftDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Swift refused to owe the pushes, and then took the undo. Before, the messages stayed
    stored, never pushed, behind a 503."""
    clock = FakeClock()
    sid, _ = swift.create_subscription(
        P, Q, NewSubscription("http://127.0.0.1:9/x", 3600, {}, "s"), clock.now_ms()
    )
    post = [NewMessage('"once"', 3600, 0, "job-3"), NewMessage('"plain"', 3600, 0)]
    with monkeypatch.context() as patched:
        pushes = FailingWrites(patched, sid, deletes=False)
        with pytest.raises(errors.StorageUnavailable):
            swift.post_messages(P, Q, post, ALICE, clock.now_ms())
    assert pushes.refused[0].startswith("PUT "), "the pushes were owed"
    assert swift.stats(P, Q, clock.now_ms()).total == 0
    assert leased_now(swift, clock) == []

    stored = swift.post_messages(P, Q, post, ALICE, clock.now_ms())
    assert stored.duplicates == ()
    assert sorted(leased_now(swift, clock)) == sorted(stored.ids)


def test_a_repeat_of_a_post_killed_before_owing_its_pushes_owes_them(
    swift: SwiftDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process died between storing the message and owing its push: the repeat, once the
    first post's time is up, is its duplicate and owes the push."""
    clock = FakeClock()
    sid, _ = swift.create_subscription(
        P, Q, NewSubscription("http://127.0.0.1:9/x", 3600, {}, "s"), clock.now_ms()
    )
    post = [NewMessage('"once"', 3600, 0, "job-4")]
    with monkeypatch.context() as patched:
        pushes = FailingWrites(patched, sid, ProcessKilled)
        with pytest.raises(ProcessKilled):
            swift.post_messages(P, Q, post, ALICE, clock.now_ms())
    assert pushes.refused[0].startswith("PUT "), "the pushes were owed"
    assert swift.stats(P, Q, clock.now_ms()).total == 1
    assert leased_now(swift, clock) == []

    clock.advance(ms=swift._dedup.dead_after_ms)
    repeat = swift.post_messages(P, Q, post, ALICE, clock.now_ms())
    assert repeat.duplicates == (0,)
    assert leased_now(swift, clock) == repeat.ids
    assert swift.stats(P, Q, clock.now_ms()).total == 1


def test_dead_letters_whose_pushes_could_not_be_owed_are_owed_when_copied_again(
    swift: SwiftDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first copy into the dead-letter queue stored the copy and failed to owe its push;
    the claim that copies it again (the original is still held) owes it."""
    clock = FakeClock()
    sid, _ = swift.create_subscription(
        P, "dlq", NewSubscription("http://127.0.0.1:9/x", 3600, {}, "s"), clock.now_ms()
    )
    posted = swift.post_messages(P, Q, [NewMessage('"dead"', 3600, 0)], ALICE, clock.now_ms())
    dead = swift.get_messages(P, Q, posted.ids, clock.now_ms())
    with monkeypatch.context() as patched:
        pushes = FailingWrites(patched, sid)
        with pytest.raises(errors.StorageUnavailable):
            swift.receive_dead_letters(P, OverLimit("dlq", None, tuple(dead)), clock.now_ms())
    assert pushes.refused[0].startswith("PUT "), "the push was owed"
    assert swift.stats(P, "dlq", clock.now_ms()).total == 1

    swift.receive_dead_letters(P, OverLimit("dlq", None, tuple(dead)), clock.now_ms())
    assert swift.stats(P, "dlq", clock.now_ms()).total == 1
    leased = swift.lease_pushes(P, "dlq", LeaseRequest(clock.now_ms(), 30_000, 10))
    assert [d.message.id for d in leased] == posted.ids


def generation_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The prefixes of the numbered generations (rate, request places) read from now on."""
    reads: list[str] = []
    latest = PushLimitOps._latest_generation

    def counted(ops: PushLimitOps, prefix: str) -> tuple[int, dict[str, Any] | None]:
        reads.append(prefix)
        return latest(ops, prefix)

    monkeypatch.setattr(PushLimitOps, "_latest_generation", counted)
    return reads


def test_a_lease_reads_each_request_place_of_a_subscription_once(
    swift: SwiftDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lease of more pushes than a subscription has request places takes the free places
    and parks the rest, reading each place once (before, every push read the places from
    the first: 50 reads here instead of 5)."""
    clock = FakeClock()
    options = {"_max_concurrent_dispatches": 5}
    swift.create_subscription(
        P, Q, NewSubscription("http://127.0.0.1:9/x", 3600, options, "s"), clock.now_ms()
    )
    messages = [NewMessage(f'"{i}"', 3600, 0) for i in range(12)]
    swift.post_messages(P, Q, messages, ALICE, clock.now_ms())
    reads = generation_reads(monkeypatch)
    leased = swift.lease_pushes(P, Q, LeaseRequest(clock.now_ms(), 30_000, 12))
    assert len(leased) == 5
    place_reads = [prefix for prefix in reads if prefix.startswith("p/")]
    assert sorted(place_reads) == sorted(set(place_reads))
    assert len(place_reads) == 5


def test_a_settle_frees_the_place_its_push_took_without_reading_the_others(
    swift: SwiftDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    options = {"_max_concurrent_dispatches": 5}
    swift.create_subscription(
        P, Q, NewSubscription("http://127.0.0.1:9/x", 3600, options, "s"), clock.now_ms()
    )
    messages = [NewMessage(f'"{i}"', 3600, 0) for i in range(6)]
    swift.post_messages(P, Q, messages, ALICE, clock.now_ms())
    leased = swift.lease_pushes(P, Q, LeaseRequest(clock.now_ms(), 30_000, 6))
    assert len(leased) == 5
    reads = generation_reads(monkeypatch)
    swift.settle_pushes(P, Q, Settlement([(leased[-1], None)]), clock.now_ms())
    assert len([prefix for prefix in reads if prefix.startswith("p/")]) == 1
    monkeypatch.undo()
    # The place is free: the parked sixth push is owed again and takes it.
    [sixth] = swift.lease_pushes(P, Q, LeaseRequest(clock.now_ms(), 30_000, 6))
    assert sixth.message.body == "5"


def test_a_give_back_reads_the_parked_pushes_not_the_queue_s_backlog(
    swift: SwiftDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request place given back owes again the oldest push parked for one, found in the
    subscription's index of parked pushes: the queue's pushes owed later (a backlog of
    delayed messages) are not listed for it."""
    clock = FakeClock()
    options = {"_max_concurrent_dispatches": 1}
    swift.create_subscription(
        P, Q, NewSubscription("http://127.0.0.1:9/x", 3600, options, "s"), clock.now_ms()
    )
    later = [NewMessage(f'"later-{i}"', 3600, 600_000) for i in range(30)]
    swift.post_messages(P, Q, later, ALICE, clock.now_ms())
    now = [NewMessage(f'"{i}"', 3600, 0) for i in range(3)]
    swift.post_messages(P, Q, now, ALICE, clock.now_ms())
    [first] = swift.lease_pushes(
        P, Q, LeaseRequest(clock.now_ms(), 30_000, 10)
    )  # the others are parked
    assert first.message.body == "0"
    walked: list[str] = []
    walk = swift._swift.walk

    def counted(container: str, prefix: str, **kwargs: Any) -> Any:
        walked.append(prefix)
        return walk(container, prefix, **kwargs)

    monkeypatch.setattr(swift._swift, "walk", counted)
    swift.settle_pushes(P, Q, Settlement([(first, None)]), clock.now_ms())
    assert walked, "nothing was listed"
    assert [prefix for prefix in walked if prefix.startswith("q/")] == []
    monkeypatch.undo()
    [second] = swift.lease_pushes(P, Q, LeaseRequest(clock.now_ms(), 30_000, 10))
    assert second.message.body == "1"


def test_the_latest_numbered_object_is_found_in_one_listing_however_many_there_are(
    swift: SwiftDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rate and place generations only ever grow. With more of them than a listing page
    holds, the latest was the page's last plus one GET per generation past it; a reverse
    listing names the highest at once (here the page holds 3 of 7)."""
    client = swift._swift
    container = swift._container(names.PUSHES)
    prefix = "r/test-generations/"
    for number in range(1, 8):
        body = f'{{"n": {number}}}'.encode()
        assert client.create(container, prefix + names.number_part(number), body, "x/y")
    monkeypatch.setattr(connect, "LISTING_LIMIT", 3)
    gets: list[str] = []
    get = client.get

    def counted(container: str, name: str, **kwargs: Any) -> Any:
        gets.append(name)
        return get(container, name, **kwargs)

    monkeypatch.setattr(client, "get", counted)
    number, found = client.latest_numbered(container, prefix)
    assert found is not None and (number, found[1]) == (7, b'{"n": 7}')
    assert len(gets) == 2  # the highest, and the one after it (not there)


def reads_under_overwrites(
    client: SwiftClient, container: str, name: str, missing: Callable[[], bool]
) -> tuple[int, int, int]:
    """Three threads overwrite the object (its body and headers as they are) while three read
    it, each with a plain GET and with ``missing`` (the read under test: True when it took
    the object for absent), until plain GETs have answered 404 three times (two minutes at
    most): (plain 404s, reads under test that missed, reads under test)."""
    found = client.get(container, name)
    assert found is not None
    headers, body = found
    kept = {k: v for k, v in headers.items() if k.startswith("x-object-meta-")}
    stopping, counting = threading.Event(), threading.Lock()
    plain_404s, misses, reads = [0], [0], [0]

    def overwrite() -> None:
        while not stopping.is_set():
            client.put(container, name, body, headers["content-type"], kept)

    def read() -> None:
        while not stopping.is_set():
            plain_404 = client.get(container, name) is None
            missed = missing()
            with counting:
                plain_404s[0] += plain_404
                misses[0] += missed
                reads[0] += 1

    threads = [threading.Thread(target=overwrite) for _ in range(3)]
    threads += [threading.Thread(target=read) for _ in range(3)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 120
    while plain_404s[0] < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    stopping.set()
    for thread in threads:
        thread.join()
    assert plain_404s[0] >= 3, "no GET raced an overwrite into a 404: the fault did not happen"
    return plain_404s[0], misses[0], reads[0]


def test_a_read_of_an_object_known_to_exist_is_not_answered_404_by_an_overwrite(
    swift: SwiftDriver,
) -> None:
    """A GET that races an overwrite of its object may answer 404: a dedup generation being
    confirmed while a repeat polled it was taken for forgotten, and replaced, so its id was
    stored twice. A ``known`` read reads a 404 again before it believes it."""
    client, container = swift._swift, swift._container(names.DEDUP)
    client.put(container, "overwritten", b"0", "x")
    _, misses, reads = reads_under_overwrites(
        client,
        container,
        "overwritten",
        lambda: client.get(container, "overwritten", known=True) is None,
    )
    assert misses == 0, (misses, reads)
