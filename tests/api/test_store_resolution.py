"""One place resolves which store a queue lives on (``Service.stores``): every way a message,
claim, subscription or push of a queue is read or written follows it, so a queue served by a
second store never touches the first."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.receiver import receiver
from tests.helpers.api import PROJECT, Api, api_on
from tests.helpers.push import senders, subscribe
from tests.helpers.stores import close_test_driver, open_test_driver, store_url
from zaqar_delay.conf import EncryptionSettings
from zaqar_delay.push.dispatcher import Dispatcher
from zaqar_delay.storage.base import Driver
from zaqar_delay.stores import Stores

MOVED = "elsewhere"


def serve_moved_queue_from(second: Driver, stores: Stores, monkeypatch: pytest.MonkeyPatch) -> None:
    default = stores.default

    def for_queue(project: str, queue: str, flavor: str | None = None) -> Driver:
        return second if queue == MOVED else default

    monkeypatch.setattr(stores, "for_queue", for_queue)
    monkeypatch.setattr(stores, "place", for_queue)
    monkeypatch.setattr(stores, "named", lambda: (("default", default), ("second", second)))


@pytest.fixture
def two_stores(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Api, Driver]]:
    """The API on the embedded store, with queue ``elsewhere`` served by a MongoDB store."""
    second = open_test_driver(store_url(request, "mongodb"))
    for api in api_on(request, "embedded", encryption=EncryptionSettings(key="key-1")):
        serve_moved_queue_from(second, api.service.stores, monkeypatch)
        yield api, second
    close_test_driver(second)


def test_every_path_of_a_queue_uses_the_store_it_resolves_to(
    two_stores: tuple[Api, Driver],
) -> None:
    api, second = two_stores
    created = api.put(f"/v2/queues/{MOVED}", json={"_enable_encrypt_messages": True})
    assert created.status_code == 201
    dispatcher = Dispatcher(api.service, senders(), concurrency=2)
    try:
        with receiver() as hook:
            subscribe(api, hook, queue=MOVED)
            [first, second_id] = api.post_messages(MOVED, {"body": "one"}, {"body": "two"})
            edited = api.patch(f"/v2/queues/{MOVED}/messages/{first}", json={"body": "uno"})
            assert edited.status_code == 204
            assert dispatcher.run_once() == 2
            pushed = sorted(push.json()["body"] for push in hook.wait_for(2))
            assert pushed == ["two", "uno"]
    finally:
        dispatcher.stop()
    claim = api.post(f"/v2/queues/{MOVED}/claims", params={"limit": "1"})
    assert [m["id"] for m in claim.json["messages"]] == [first]
    assert api.get(f"/v2/queues/{MOVED}/stats").json["messages"]["claimed"] == 1
    subscriptions = api.get(f"/v2/queues/{MOVED}/subscriptions").json["subscriptions"]
    assert len(subscriptions) == 1

    # All of it is on the second store, sealed; none of it on the first.
    now_ms = api.clock.now_ms()
    held = second.get_messages(PROJECT, MOVED, [first, second_id], now_ms)
    assert len(held) == 2 and all("_zd_enc" in message.body for message in held)
    default = api.service.stores.default
    assert default.get_metadata(PROJECT, MOVED) is None
    assert default.get_messages(PROJECT, MOVED, [first, second_id], now_ms) == []
    assert default.list_subscriptions(PROJECT, MOVED, None, 10, now_ms) == []
