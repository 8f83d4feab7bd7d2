"""``trust+http(s)://`` subscribers under keystone: a trust from the subscribing user to the
``[trustee]`` service user is made when subscribing, each push carries a token obtained
through it, and it is deleted with the subscription.

keystonemiddleware validates the user's token (its AuthTokenFixture); the trust calls and the
service user's authentication go to a Keystone v3 stand-in (``testbed/keystone_standin.py``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.keystone_standin import KeystoneStandIn
from testbed.receiver import receiver
from tests.helpers.api import Api
from tests.helpers.keystone import (
    SERVICE_USER,
    SUBS,
    Keystone,
    dispatch_once,
    keystone_app,
    trustee_conf,
)
from tests.helpers.push import dispatching, served
from zaqar_delay.service import Service
from zaqar_delay.storage.redis.embedded import EmbeddedRedis


@pytest.fixture
def deployment(
    tmp_path: Path, embedded_redis: EmbeddedRedis, keystone_server: KeystoneStandIn
) -> Iterator[tuple[Keystone, Service, Path]]:
    extra = trustee_conf(keystone_server)
    for keystone, service in keystone_app(tmp_path, embedded_redis, extra):
        yield keystone, service, tmp_path / "zaqar-delay.conf"


def user_token(keystone: Keystone, server: KeystoneStandIn) -> str:
    """A member of p1 (user ``u-p1``), known to keystonemiddleware and to the stand-in."""
    token = keystone.token("p1", "member")
    server.user_tokens[token] = "u-p1"
    return token


def subscribe_trust(keystone: Keystone, token: str, url: str) -> str:
    """Subscribe ``trust+url`` with ``token``; the subscription's id."""
    created = keystone.call(
        "POST", SUBS, token=token, json={"subscriber": "trust+" + url, "ttl": 3600}
    )
    assert created.status_code == 201, created.text
    return str(created.json["subscription_id"])


def test_a_trust_subscriber_is_pushed_with_a_token_obtained_through_its_trust(
    deployment: tuple[Keystone, Service, Path], keystone_server: KeystoneStandIn
) -> None:
    keystone, service, conf = deployment
    token = user_token(keystone, keystone_server)
    with receiver() as hook:
        sid = subscribe_trust(keystone, token, hook.url)
        # The trust: from the user to the service user, on the project, with the user's roles.
        (trust,) = keystone_server.trusts.values()
        assert trust["trustor_user_id"] == "u-p1"
        assert trust["trustee_user_id"] == SERVICE_USER
        assert trust["project_id"] == "p1"
        assert sorted(r["name"] for r in trust["roles"]) == ["member", "reader"]
        assert trust["impersonation"] is True
        posted = keystone.call(
            "POST", "/v2/queues/q/messages", token=token, json={"messages": [{"body": 1}]}
        )
        assert posted.status_code == 201, posted.text
        dispatch_once(service, conf)
        (push,) = hook.wait_for(1)
        sent = push.headers["X-Auth-Token"]
        assert keystone_server.trust_tokens[sent] == trust["id"]
        assert push.json()["body"] == 1
        shown = keystone.call("GET", f"{SUBS}/{sid}", token=token).json
        assert shown["subscriber"] == "trust+" + hook.url
        assert shown["last_delivery"]["outcome"] == "delivered"
        # Deleting the subscription deletes its trust.
        assert keystone.call("DELETE", f"{SUBS}/{sid}", token=token).status_code == 204
        assert keystone_server.trusts == {}


def test_a_deleted_trust_fails_the_push_for_good_and_sends_nothing(
    deployment: tuple[Keystone, Service, Path], keystone_server: KeystoneStandIn
) -> None:
    keystone, service, conf = deployment
    token = user_token(keystone, keystone_server)
    with receiver() as hook:
        sid = subscribe_trust(keystone, token, hook.url)
        keystone_server.trusts.clear()  # the user revoked it in Keystone
        keystone.call(
            "POST", "/v2/queues/q/messages", token=token, json={"messages": [{"body": 1}]}
        )
        dispatch_once(service, conf)
        assert hook.received == []
        shown = keystone.call("GET", f"{SUBS}/{sid}", token=token).json
        assert shown["last_delivery"]["outcome"] == "permanent"


def test_only_the_service_sets_a_trust_id(
    deployment: tuple[Keystone, Service, Path], keystone_server: KeystoneStandIn
) -> None:
    keystone, _, _ = deployment
    token = user_token(keystone, keystone_server)
    # The attack: naming another user's trust to the service user, to act as them.
    stolen = {"subscriber": "trust+http://203.0.113.9/x", "options": {"trust_id": "someone"}}
    refused = keystone.call("POST", SUBS, token=token, json=stolen)
    assert refused.status_code == 400
    assert "trust_id" in refused.json["description"]
    assert keystone_server.trusts == {}
    created = keystone.call(
        "POST", SUBS, token=token, json={"subscriber": "trust+http://203.0.113.9/x"}
    )
    sid = created.json["subscription_id"]
    patch = keystone.call(
        "PATCH", f"{SUBS}/{sid}", token=token, json={"options": {"trust_id": "someone"}}
    )
    assert patch.status_code == 400
    # Other options change; the trust stays.
    kept = keystone.call("PATCH", f"{SUBS}/{sid}", token=token, json={"options": {"a": 1}})
    assert kept.status_code == 204, kept.text
    options = keystone.call("GET", f"{SUBS}/{sid}", token=token).json["options"]
    assert options["a"] == 1 and options["trust_id"] in keystone_server.trusts


def test_when_keystone_refuses_the_trust_nothing_is_subscribed(
    deployment: tuple[Keystone, Service, Path], keystone_server: KeystoneStandIn
) -> None:
    keystone, _, _ = deployment
    token = keystone.token("p1", "member")  # not a token the stand-in knows: 403 there
    answer = keystone.call(
        "POST", SUBS, token=token, json={"subscriber": "trust+http://203.0.113.9/x"}
    )
    assert answer.status_code == 503, answer.text
    assert keystone_server.trusts == {}
    listed = keystone.call("GET", SUBS, token=keystone.token("p1", "reader")).json
    assert listed["subscriptions"] == []


def test_under_noauth_a_trust_subscriber_is_pushed_without_a_token(api: Api) -> None:
    with receiver() as hook:
        created = api.post(SUBS, json={"subscriber": "trust+" + hook.url})
        assert created.status_code == 201, created.text
        api.post_messages("q", {"body": 1})
        with dispatching(api) as dispatcher:
            assert dispatcher.run_once() == 1
        (push,) = hook.wait_for(1)
        # Sent to the URI without trust+ (no Keystone here: no trust, no token).
        assert "X-Auth-Token" not in push.headers
        assert push.json()["body"] == 1


def test_tempests_trust_subscription_posts_zaqars_notification_to_another_queue(
    deployment: tuple[Keystone, Service, Path], keystone_server: KeystoneStandIn
) -> None:
    """Tempest's ``test_trust_subscription``: a ``trust+`` subscriber that is the API itself,
    posting each notification to another queue of the project through a ``post_data``
    template, with the token of the trust. Every notification there is Zaqar's: the message
    as posted, its queue's name and ``Message_Type``."""
    keystone, service, conf = deployment
    token = user_token(keystone, keystone_server)
    issued: list[str] = []

    def validated_as_keystone_would(trust_token: str, trust: dict[str, Any]) -> None:
        # A trust-scoped token with impersonation is the trustor's, on the trust's project,
        # with the trust's roles.
        issued.append(trust_token)
        keystone.tokens.add_token_data(
            token_id=trust_token,
            project_id=trust["project_id"],
            user_id=trust["trustor_user_id"],
            role_list=[role["name"] for role in trust["roles"]],
        )

    keystone_server.on_trust_token = validated_as_keystone_would
    with served(keystone.client.app) as api_url:
        options = {
            "post_data": json.dumps({"messages": [{"body": "$zaqar_message$", "ttl": 60}]}),
            "post_headers": {"X-Project-ID": "p1", "Client-ID": str(uuid.uuid4())},
        }
        subscriber = f"trust+{api_url}/v2/queues/sub/messages"
        created = keystone.call(
            "POST",
            SUBS,
            token=token,
            json={"ttl": 1200, "subscriber": subscriber, "options": options},
        )
        assert created.status_code == 201, created.text
        message = {"body": {"key1": "value1", "key2": 7}, "ttl": 300}
        posted = keystone.call(
            "POST", "/v2/queues/q/messages", token=token, json={"messages": [message]}
        )
        assert posted.status_code == 201, posted.text
        dispatch_once(service, conf)
    assert len(issued) == 1, "the push was not made with a token of the trust"
    listed = keystone.call("GET", "/v2/queues/sub/messages", token=token)
    assert listed.status_code == 200, listed.text
    [notification] = listed.json["messages"]
    assert notification["body"] == {**message, "queue_name": "q", "Message_Type": "Notification"}
    assert notification["ttl"] == 60
