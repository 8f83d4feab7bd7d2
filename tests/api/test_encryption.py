"""_enable_encrypt_messages: bodies encrypted at rest, read back in the clear by every route,
readable after a key rotation, refused when no key is configured."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
from collections.abc import Iterator
from typing import Any

import falcon.testing
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from testbed.receiver import receiver
from tests.helpers.api import HEADERS, PROJECT, Api, api_on, assert_error
from tests.helpers.push import dispatching
from tests.helpers.stores import redis_values_text
from zaqar_delay.api.app import build, create_app
from zaqar_delay.conf import EncryptionSettings, Settings
from zaqar_delay.encryption import FIELD
from zaqar_delay.models import OverLimit
from zaqar_delay.push.dispatcher import Dispatcher
from zaqar_delay.push.guard import AddressGuard
from zaqar_delay.push.mail import MailSender
from zaqar_delay.push.senders import Senders
from zaqar_delay.push.webhook import WebhookSender
from zaqar_delay.schedules import names
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.mongodb.driver import MongoDriver
from zaqar_delay.storage.redis.driver import RedisDriver

SECRET = "top-secret-4711"
PATCH = {"Content-Type": "application/openstack-messaging-v2.0-json-patch"}
TURN_ON = [{"op": "add", "path": "/metadata/_enable_encrypt_messages", "value": True}]


@pytest.fixture(params=["embedded", "mongodb"])
def api(request: pytest.FixtureRequest) -> Iterator[Api]:
    yield from api_on(request, request.param, encryption=EncryptionSettings(key="key-1"))


def raw_store_text(driver: Driver) -> str:
    """Everything the store holds for this test's namespace, as text."""
    if isinstance(driver, MongoDriver):
        docs = [d for name in driver._db.list_collection_names() for d in driver._db[name].find()]
        return json.dumps(docs, default=str)
    assert isinstance(driver, RedisDriver)
    return redis_values_text(driver._client, f"{driver._keys.prefix}:*")


def bodies(result: falcon.testing.Result) -> list[Any]:
    assert result.status_code in (200, 201), result.text
    return [m["body"] for m in result.json["messages"]]


def test_the_store_holds_no_plaintext_and_every_route_reads_it(api: Api) -> None:
    assert api.put("/v2/queues/sealed", json={"_enable_encrypt_messages": True}).status_code == 201
    assert api.get("/v2/queues/sealed").json["_enable_encrypt_messages"] is True
    ids = api.post_messages("sealed", *[{"body": {"secret": SECRET, "i": i}} for i in range(4)])
    # A control on a plain queue shows the raw read can see bodies at all.
    api.post_messages("plain", {"body": "visible-plaintext"})
    raw = raw_store_text(api.driver)
    assert "visible-plaintext" in raw
    assert SECRET not in raw

    expected = [{"secret": SECRET, "i": i} for i in range(4)]
    listed = api.get("/v2/queues/sealed/messages", params={"echo": "true"})
    assert bodies(listed) == expected
    assert api.get(f"/v2/queues/sealed/messages/{ids[0]}").json["body"] == expected[0]
    bulk = api.get("/v2/queues/sealed/messages", params={"ids": ",".join(ids[:2])})
    assert bodies(bulk) == expected[:2]
    claim = api.post("/v2/queues/sealed/claims", params={"limit": "2"})
    assert bodies(claim) == expected[:2]
    claim_href = claim.headers["location"]
    assert bodies(api.get(claim_href)) == expected[:2]
    popped = api.delete("/v2/queues/sealed/messages", params={"pop": "2"})
    assert bodies(popped) == expected[2:]


def test_patch_turns_encryption_on_for_later_posts(api: Api) -> None:
    api.put("/v2/queues/q")
    api.post_messages("q", {"body": "before"})
    patched = api.patch(
        "/v2/queues/q",
        body=json.dumps(TURN_ON),
        headers=PATCH,
    )
    assert patched.status_code == 200, patched.text
    api.post_messages("q", {"body": SECRET})
    assert SECRET not in raw_store_text(api.driver)
    assert bodies(api.get("/v2/queues/q/messages", params={"echo": "true"})) == ["before", SECRET]


def test_an_edited_body_is_sealed_again(api: Api) -> None:
    api.put("/v2/queues/sealed", json={"_enable_encrypt_messages": True})
    [mid] = api.post_messages("sealed", {"body": "draft"})
    edited = api.patch(f"/v2/queues/sealed/messages/{mid}", json={"body": {"secret": SECRET}})
    assert edited.status_code == 204, edited.text
    assert SECRET not in raw_store_text(api.driver)
    assert api.get(f"/v2/queues/sealed/messages/{mid}").json["body"] == {"secret": SECRET}
    assert bodies(api.post("/v2/queues/sealed/claims")) == [{"secret": SECRET}]


def test_a_schedule_s_message_is_kept_sealed_and_fires_in_the_clear(api: Api) -> None:
    """The body a schedule posts at each slot is kept in its definition for as long as the
    schedule lives: on a queue that encrypts, it is sealed there too (it was kept in the
    clear), shown, changed and fired in the clear."""
    api.put("/v2/queues/sealed", json={"_enable_encrypt_messages": True})
    every = {"every": 60, "message": {"body": {"secret": SECRET}, "ttl": 600}}
    assert api.put("/v2/queues/sealed/schedules/s", json=every).status_code == 201
    clear = {**every, "message": {"body": "clear"}}
    assert api.put("/v2/queues/plain/schedules/s", json=clear).status_code == 201
    raw = raw_store_text(api.driver)
    assert "clear" in raw  # the control: the raw read sees a schedule's body
    assert SECRET not in raw
    assert api.get("/v2/queues/sealed/schedules/s").json["message"]["body"] == {"secret": SECRET}
    paused = api.patch("/v2/queues/sealed/schedules/s", json={"paused": True})
    assert paused.status_code == 204, paused.text
    resumed = api.patch("/v2/queues/sealed/schedules/s", json={"paused": False})
    assert resumed.status_code == 204, resumed.text
    assert SECRET not in raw_store_text(api.driver)
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=60_000)
        dispatcher.run_once()
    assert api.get("/v2/queues/sealed/schedules/s").json["fires"] == 1
    assert bodies(api.post("/v2/queues/sealed/claims")) == [{"secret": SECRET}]
    assert SECRET not in raw_store_text(api.driver)


def test_a_schedule_written_again_is_kept_as_its_queue_now_asks(api: Api) -> None:
    """A schedule written before its queue began encrypting is sealed when written again
    unchanged, keeping its plan (the same generation and anchor), and the reverse."""
    every = {"every": 60, "message": {"body": {"secret": SECRET}, "ttl": 600}}
    assert api.put("/v2/queues/q/schedules/s", json=every).status_code == 201
    definition = names.definition_queue("q", "s")
    before = api.store(definition).get_metadata(PROJECT, definition)
    assert before is not None and SECRET in raw_store_text(api.driver)
    assert api.patch("/v2/queues/q", body=json.dumps(TURN_ON), headers=PATCH).status_code == 200
    assert api.put("/v2/queues/q/schedules/s", json=every).status_code == 204
    after = api.store(definition).get_metadata(PROJECT, definition)
    assert after is not None and SECRET not in raw_store_text(api.driver)
    kept = ("generation", "written_ms")
    assert [after[k] for k in kept] == [before[k] for k in kept]
    assert api.get("/v2/queues/q/schedules/s").json["message"]["body"] == {"secret": SECRET}
    turn_off = [{"op": "replace", "path": "/metadata/_enable_encrypt_messages", "value": False}]
    assert api.patch("/v2/queues/q", body=json.dumps(turn_off), headers=PATCH).status_code == 200
    assert api.put("/v2/queues/q/schedules/s", json=every).status_code == 204
    assert api.store(definition).get_metadata(PROJECT, definition) == before


def test_a_schedule_sealed_with_a_key_no_longer_configured_fires_once_it_is_back(
    api: Api,
) -> None:
    """Without the key its message was sealed with, a schedule is shown sealed and each fire
    is refused, which ``last_error`` says; with the key back (as an old key), it fires."""
    api.put("/v2/queues/sealed", json={"_enable_encrypt_messages": True})
    every = {"every": 60, "message": {"body": {"secret": SECRET}, "ttl": 600}}
    assert api.put("/v2/queues/sealed/schedules/s", json=every).status_code == 201

    def server(encryption: EncryptionSettings) -> Api:
        app, service = build(Settings(encryption=encryption), driver=api.driver, clock=api.clock)
        return Api(falcon.testing.TestClient(app), api.clock, api.driver, service)

    forgot = server(EncryptionSettings(key="key-2"))
    shown = forgot.get("/v2/queues/sealed/schedules/s").json
    assert SECRET not in json.dumps(shown) and FIELD in shown["message"]["body"]
    with dispatching(forgot) as dispatcher:
        api.clock.advance(ms=60_000)
        assert dispatcher.run_once() == 1
    failing = forgot.get("/v2/queues/sealed/schedules/s").json
    assert failing["fires"] == 0 and FIELD in failing["last_error"]["description"]
    back = server(EncryptionSettings(key="key-2", old_keys=("key-1",)))
    with dispatching(back) as dispatcher:
        api.clock.advance(ms=30_000)
        assert dispatcher.run_once() == 1
    assert back.get("/v2/queues/sealed/schedules/s").json["fires"] == 1
    assert bodies(back.post("/v2/queues/sealed/claims")) == [{"secret": SECRET}]


def test_a_body_encrypted_under_an_old_key_reads_after_rotation(api: Api) -> None:
    api.put("/v2/queues/sealed", json={"_enable_encrypt_messages": True})
    [old_id] = api.post_messages("sealed", {"body": SECRET})

    def server(encryption: EncryptionSettings) -> falcon.testing.TestClient:
        settings = Settings(encryption=encryption)  # the driver is given
        app = create_app(settings, driver=api.driver, clock=api.clock)
        return falcon.testing.TestClient(app)

    rotated = server(EncryptionSettings(key="key-2", old_keys=("key-1",)))
    path = "/v2/queues/sealed/messages"
    got = rotated.simulate_get(f"{path}/{old_id}", headers=HEADERS)
    assert got.json["body"] == SECRET
    posted = rotated.simulate_post(path, json={"messages": [{"body": "new"}]}, headers=HEADERS)
    new_id = posted.json["resources"][0].rsplit("/", 1)[1]
    # Without the old key, the old body stays sealed; the new one reads.
    forgot = server(EncryptionSettings(key="key-2"))
    assert forgot.simulate_get(f"{path}/{new_id}", headers=HEADERS).json["body"] == "new"
    assert SECRET not in json.dumps(forgot.simulate_get(f"{path}/{old_id}", headers=HEADERS).json)


@pytest.fixture
def keyless(request: pytest.FixtureRequest) -> Iterator[Api]:
    yield from api_on(request, "embedded")


def test_without_a_key_a_queue_cannot_ask_for_encryption(keyless: Api) -> None:
    wanted = "_enable_encrypt_messages needs a key: set [transport] message_encryption_key"
    result = keyless.put("/v2/queues/q", json={"_enable_encrypt_messages": True})
    assert_error(result, 400, "Invalid API request")
    assert result.json["description"].startswith(wanted)
    assert keyless.get("/v2/queues").json["queues"] == []
    keyless.put("/v2/queues/q")
    patched = keyless.patch(
        "/v2/queues/q",
        body=json.dumps(TURN_ON),
        headers=PATCH,
    )
    assert patched.status_code == 400
    assert patched.json["description"].startswith(wanted)
    assert keyless.get("/v2/queues/q").json["_enable_encrypt_messages"] is False
    # Turning it off is always allowed.
    assert keyless.put("/v2/queues/r", json={"_enable_encrypt_messages": False}).status_code == 201


def test_a_push_carries_the_posted_body_while_the_store_keeps_it_sealed(api: Api) -> None:
    assert api.put("/v2/queues/sealed", json={"_enable_encrypt_messages": True}).status_code == 201
    sender = Senders(WebhookSender(AddressGuard(), timeout_s=5), MailSender("", 0, "zd@x.y", 5))
    dispatcher = Dispatcher(api.service, sender, concurrency=2)
    try:
        with receiver() as hook:
            created = api.post("/v2/queues/sealed/subscriptions", json={"subscriber": hook.url})
            assert created.status_code == 201, created.text
            api.post_messages("sealed", {"body": {"secret": SECRET}})
            assert dispatcher.run_once() == 1
            [push] = hook.wait_for(1)
    finally:
        dispatcher.stop()
    assert push.json()["body"] == {"secret": SECRET}
    assert SECRET not in raw_store_text(api.driver)


@pytest.mark.parametrize("dead_letter_encrypted", [True, False])
def test_a_failed_push_of_a_sealed_message_is_dead_lettered_sealed(
    api: Api, dead_letter_encrypted: bool
) -> None:
    metadata = {"_enable_encrypt_messages": True, "_dead_letter_queue": "dead"}
    assert api.put("/v2/queues/sealed", json=metadata).status_code == 201
    dead = {"_enable_encrypt_messages": dead_letter_encrypted}
    assert api.put("/v2/queues/dead", json=dead).status_code == 201
    sender = Senders(WebhookSender(AddressGuard(), timeout_s=5), MailSender("", 0, "zd@x.y", 5))
    dispatcher = Dispatcher(api.service, sender, concurrency=2)
    try:
        with receiver(statuses=[400]) as hook:  # permanent: dead-lettered at once
            api.post("/v2/queues/sealed/subscriptions", json={"subscriber": hook.url})
            [mid] = api.post_messages("sealed", {"body": {"secret": SECRET}})
            assert dispatcher.run_once() == 1
            hook.wait_for(1)
    finally:
        dispatcher.stop()
    # Read through the API, the dead letter holds the posted body; at rest, nothing is plain
    # (also when the dead-letter queue does not encrypt: the message came from one that does).
    [letter] = bodies(api.get("/v2/queues/dead/messages?echo=true"))
    assert letter["message"]["id"] == mid and letter["message"]["body"] == {"secret": SECRET}
    assert SECRET not in raw_store_text(api.driver)


def test_a_claim_dead_letters_a_sealed_body_that_still_opens_there(api: Api) -> None:
    metadata = {
        "_enable_encrypt_messages": True,
        "_max_claim_count": 1,
        "_dead_letter_queue": "dead",
    }
    assert api.put("/v2/queues/sealed", json=metadata).status_code == 201
    [mid] = api.post_messages("sealed", {"body": {"secret": SECRET}})
    first = api.post("/v2/queues/sealed/claims")
    assert bodies(first) == [{"secret": SECRET}]
    assert api.delete(first.headers["location"]).status_code == 204
    # Claimed once already: the next claim moves it to the (plain) dead-letter queue.
    assert api.post("/v2/queues/sealed/claims").status_code == 204
    got = api.get(f"/v2/queues/dead/messages/{mid}")
    assert got.status_code == 200, got.text
    assert got.json["body"] == {"secret": SECRET}
    assert SECRET not in raw_store_text(api.driver)


def as_project(project: str) -> dict[str, str]:
    return {"X-Project-ID": project}


def fresh_id(api: Api, queue: str, headers: dict[str, str] | None = None) -> str:
    """A message id the store made for ``queue`` and holds no message under any more."""
    [mid] = api.post_messages(queue, {"body": "placeholder"}, headers=headers or {})
    assert (
        api.delete(f"/v2/queues/{queue}/messages/{mid}", headers=headers or {}).status_code == 204
    )
    return mid


def test_a_sealed_body_of_another_project_is_never_opened(api: Api) -> None:
    victim, attacker = as_project("victim"), as_project("attacker")
    encrypted = {"_enable_encrypt_messages": True}
    assert api.put("/v2/queues/orders", json=encrypted, headers=victim).status_code == 201
    [mid] = api.post_messages("orders", {"body": {"secret": SECRET}}, headers=victim)
    now_ms = api.clock.now_ms()
    [at_rest] = api.driver.get_messages("victim", "orders", [mid], now_ms)
    sealed = at_rest.body
    # What a backup or a replica shows: a working seal, which the server opens for its owner.
    cipher = api.service.encryption.cipher
    assert cipher is not None and cipher.decrypt(sealed, "victim") == {"secret": SECRET}
    assert SECRET not in json.dumps(sealed)

    # Posted or edited into the attacker's own queues, plain or encrypted, it is refused.
    api.put("/v2/queues/loot", json=encrypted, headers=attacker)
    for queue in ("plain", "loot"):
        refused = api.post(
            f"/v2/queues/{queue}/messages",
            json={"messages": [{"body": sealed}]},
            headers=attacker,
        )
        assert_error(refused, 400, "Invalid API request")
        assert "reserved" in refused.json["description"]
        [own] = api.post_messages(queue, {"body": "mine"}, headers=attacker)
        edited = api.patch(
            f"/v2/queues/{queue}/messages/{own}", json={"body": sealed}, headers=attacker
        )
        assert edited.status_code == 400, edited.text
    # Written into the attacker's queues behind the API's back (a restored backup), it stays
    # sealed: the seal names the victim's project.
    for queue in ("plain", "loot"):
        copy = dataclasses.replace(at_rest, id=fresh_id(api, queue, attacker))
        api.driver.receive_dead_letters("attacker", OverLimit(queue, None, (copy,)), now_ms)
        got = api.get(f"/v2/queues/{queue}/messages/{copy.id}", headers=attacker)
        assert got.status_code == 200, got.text
        assert got.json["body"] == sealed
        assert SECRET not in got.text


def legacy_sealed(key: str, body: Any) -> dict[str, str]:
    """A body as earlier releases sealed it: ``v1``, with no associated data."""
    aes_key = hashlib.sha256(key.encode()).digest()
    nonce = os.urandom(12)
    token = AESGCM(aes_key).encrypt(nonce, json.dumps(body).encode(), None)
    key_id = hashlib.sha256(b"zaqar-delay key id\0" + aes_key).hexdigest()[:8]
    return {"_zd_enc": f"v1.{key_id}.{base64.urlsafe_b64encode(nonce + token).decode()}"}


def test_an_earlier_releases_seal_opens_only_in_a_queue_that_encrypts(api: Api) -> None:
    old = legacy_sealed("key-1", {"secret": SECRET})
    api.put("/v2/queues/sealed", json={"_enable_encrypt_messages": True})
    api.put("/v2/queues/plain")
    now_ms = api.clock.now_ms()
    for queue in ("sealed", "plain"):
        [mid] = api.post_messages(queue, {"body": "placeholder"})
        [message] = api.driver.get_messages(PROJECT, queue, [mid], now_ms)
        legacy = dataclasses.replace(message, id=fresh_id(api, queue), body=old)
        api.driver.receive_dead_letters(PROJECT, OverLimit(queue, None, (legacy,)), now_ms)
        got = api.get(f"/v2/queues/{queue}/messages/{legacy.id}")
        assert got.status_code == 200, got.text
        expected = {"secret": SECRET} if queue == "sealed" else old
        assert got.json["body"] == expected, queue
