"""``[storage] replica_acks`` on MongoDB: the write concern it sets, and the replica sets it
refuses at start (against secantusdb, a one-member replica set)."""

from __future__ import annotations

import logging
import uuid

import pytest
from pymongo import WriteConcern

from testbed.processes import SecantusServer
from zaqar_delay.errors import StorageConfigError, WriteNotReplicated
from zaqar_delay.models import NewMessage
from zaqar_delay.storage.mongodb.connect import mongo_client
from zaqar_delay.storage.mongodb.driver import MongoDriver


def driver_on(server: SecantusServer, replica_acks: int) -> MongoDriver:
    client, _ = mongo_client(server.url, 10.0, replica_acks=replica_acks, replica_ack_timeout_s=2)
    return MongoDriver(client, f"acks{uuid.uuid4().hex[:8]}", replica_acks=replica_acks)


def test_without_replica_acks_writes_wait_for_a_journaled_majority(
    secantus_server: SecantusServer,
) -> None:
    driver = driver_on(secantus_server, 0)
    try:
        assert driver.prepare() == []
        described = driver.durability()
    finally:
        driver.close()
    assert described.facts["write_concern"] == {"w": "majority", "j": True}
    assert described.facts["members"] == 1
    # A majority of one member is that member: its journal, no other machine.
    assert described.survives == ("process crash", "power loss")


def test_replica_acks_set_the_write_concern_to_that_many_secondaries() -> None:
    client, _ = mongo_client(
        "mongodb://127.0.0.1:1/", 1.0, replica_acks=2, replica_ack_timeout_s=1.5
    )
    try:
        assert client.write_concern.document == {"w": 3, "wtimeout": 1500, "j": True}
    finally:
        client.close()


def test_more_replica_acks_than_the_set_has_members_are_refused(
    secantus_server: SecantusServer,
) -> None:
    driver = driver_on(secantus_server, 1)
    try:
        with pytest.raises(
            StorageConfigError, match="at least 2 data-bearing members; this one has 1"
        ):
            driver.prepare()
    finally:
        driver.close()


def test_a_write_the_set_cannot_confirm_answers_503_saying_it_may_have_happened(
    secantus_server: SecantusServer,
) -> None:
    # As if the set lost a member after the server started: prepare() would refuse it now.
    driver = driver_on(secantus_server, 1)
    try:
        with pytest.raises(WriteNotReplicated, match="may still have happened"):
            driver.create_queue("p", "q", {}, 1000)
    finally:
        driver.close()


def test_a_pop_the_set_cannot_confirm_still_answers_its_messages(
    secantus_server: SecantusServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A pop whose removal the set does not confirm (here the removal alone asks for a
    member more than the set has) answers its messages rather than losing them, and warns."""
    driver = driver_on(secantus_server, 0)
    try:
        driver.prepare()
        new = [NewMessage(body_json=str(i), ttl_s=60, delay_ms=0) for i in range(3)]
        ids = driver.post_messages("p", "q", new, "c", 1000).ids
        messages = driver._messages
        unconfirmed = messages.with_options(write_concern=WriteConcern(w=2, wtimeout=200))
        monkeypatch.setattr(messages, "delete_many", unconfirmed.delete_many)
        with caplog.at_level(logging.WARNING, logger="zaqar_delay.storage.mongodb.claims"):
            popped = driver.pop_messages("p", "q", 2, 1001)
        # The fault: the set did not confirm the pop's removal.
        assert "a pop answered although the replica set did not confirm it" in caplog.text
        assert [m.id for m in popped] == ids[:2]
        left = driver.get_messages("p", "q", ids, 1002)
        assert [m.id for m in left] == ids[2:], "not removed"
    finally:
        driver.close()
