"""A ``trust+`` subscription sends its trustor's token to its subscriber, so only the trustor,
with their own token, may redirect it, change it or delete it (``subscriptions.py``). A
member of the same project, or anyone holding a pre-signed URL, is refused with 403.

Each attack is first shown to be within the attacker's rights where no trust is at stake (a
member may change and delete a plain subscription of the project; the pre-signed URL allows
the method), then refused on the trust+ subscription, whose pushes keep going, with the
trustor's token, to the trustor's subscriber only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.keystone_standin import KeystoneStandIn
from testbed.receiver import receiver
from tests.helpers.api import signed_headers
from tests.helpers.keystone import SUBS, Keystone, dispatch_once, keystone_app, trustee_conf
from zaqar_delay.models import NewSubscription
from zaqar_delay.push.trusts import TRUST_ID, TRUSTOR_ID
from zaqar_delay.service import Service
from zaqar_delay.storage.redis.embedded import EmbeddedRedis


@pytest.fixture
def deployment(
    tmp_path: Path, embedded_redis: EmbeddedRedis, keystone_server: KeystoneStandIn
) -> Iterator[tuple[Keystone, Service, Path]]:
    extra = trustee_conf(keystone_server) + "[signed_url]\nsecret_key = k\n"
    for keystone, service in keystone_app(tmp_path, embedded_redis, extra):
        yield keystone, service, tmp_path / "zaqar-delay.conf"


def user(keystone: Keystone, server: KeystoneStandIn, user_id: str, *roles: str) -> str:
    """A token of ``user_id`` in project p1 with ``roles``, known to both Keystones."""
    token = f"t-{user_id}"
    keystone.tokens.add_token_data(
        token_id=token, project_id="p1", user_id=user_id, role_list=list(roles)
    )
    server.user_tokens[token] = user_id
    return token


def post_one(keystone: Keystone, token: str) -> None:
    posted = keystone.call(
        "POST", "/v2/queues/q/messages", token=token, json={"messages": [{"body": 1}]}
    )
    assert posted.status_code == 201, posted.text


def test_a_member_cannot_redirect_change_or_delete_an_admins_trust_subscription(
    deployment: tuple[Keystone, Service, Path], keystone_server: KeystoneStandIn
) -> None:
    keystone, service, conf = deployment
    admin = user(keystone, keystone_server, "u-admin", "admin", "member", "reader")
    member = user(keystone, keystone_server, "u-member", "member", "reader")
    with receiver() as owned, receiver() as attacker:
        # Within the member's rights: a plain subscription of the project is theirs to change.
        plain = keystone.call("POST", SUBS, token=admin, json={"subscriber": owned.url})
        plain_path = f"{SUBS}/{plain.json['subscription_id']}"
        moved = keystone.call("PATCH", plain_path, token=member, json={"subscriber": attacker.url})
        assert moved.status_code == 204, moved.text
        assert keystone.call("DELETE", plain_path, token=member).status_code == 204

        created = keystone.call(
            "POST", SUBS, token=admin, json={"subscriber": "trust+" + owned.url, "ttl": 3600}
        )
        assert created.status_code == 201, created.text
        path = f"{SUBS}/{created.json['subscription_id']}"
        (trust,) = keystone_server.trusts.values()
        assert sorted(r["name"] for r in trust["roles"]) == ["admin", "member", "reader"]
        options = keystone.call("GET", path, token=admin).json["options"]
        assert options[TRUSTOR_ID] == "u-admin"

        for change in (
            {"subscriber": "trust+" + attacker.url},
            {"options": {"post_headers": {"X-Steal": "1"}}},
            {"ttl": 7200},
        ):
            refused = keystone.call("PATCH", path, token=member, json=change)
            assert refused.status_code == 403, (change, refused.text)
            assert "trustor" in refused.json["description"]
        deleted = keystone.call("DELETE", path, token=member)
        assert deleted.status_code == 403, deleted.text
        assert list(keystone_server.trusts) == [trust["id"]]
        shown = keystone.call("GET", path, token=admin).json
        assert shown["subscriber"] == "trust+" + owned.url
        assert shown["ttl"] == 3600 and "post_headers" not in shown["options"]

        # The admin's token still goes to the admin's subscriber only.
        post_one(keystone, member)
        dispatch_once(service, conf)
        (push,) = owned.wait_for(1)
        assert keystone_server.trust_tokens[push.headers["X-Auth-Token"]] == trust["id"]
        assert attacker.received == []


def test_a_pre_signed_url_cannot_change_or_delete_a_trust_subscription(
    deployment: tuple[Keystone, Service, Path], keystone_server: KeystoneStandIn
) -> None:
    keystone, _, _ = deployment
    admin = user(keystone, keystone_server, "u-admin", "admin", "member", "reader")
    created = keystone.call("POST", SUBS, token=admin, json={"subscriber": "trust+http://a.test/x"})
    path = f"{SUBS}/{created.json['subscription_id']}"
    plain = keystone.call("POST", SUBS, token=admin, json={"subscriber": "http://b.test/x"})
    plain_path = f"{SUBS}/{plain.json['subscription_id']}"
    share = keystone.call(
        "POST",
        "/v2/queues/q/share",
        token=admin,
        json={"paths": ["subscriptions"], "methods": ["PATCH", "DELETE"]},
    ).json
    signed = signed_headers(share)
    # The URL allows PATCH and DELETE on the queue's subscriptions: a plain one changes.
    allowed = keystone.call("PATCH", plain_path, headers=signed, json={"ttl": 7200})
    assert allowed.status_code == 204, allowed.text
    stolen = {"subscriber": "trust+http://attacker.test/steal"}
    refused = keystone.call("PATCH", path, headers=signed, json=stolen)
    assert refused.status_code == 403, refused.text
    assert "pre-signed" in refused.json["description"]
    assert keystone.call("DELETE", path, headers=signed).status_code == 403
    shown = keystone.call("GET", path, token=admin).json
    assert shown["subscriber"] == "trust+http://a.test/x"
    assert len(keystone_server.trusts) == 1


def test_the_trustor_redirects_with_a_new_trust_and_the_old_one_is_deleted(
    deployment: tuple[Keystone, Service, Path], keystone_server: KeystoneStandIn
) -> None:
    keystone, service, conf = deployment
    admin = user(keystone, keystone_server, "u-admin", "admin", "member", "reader")
    with receiver() as first, receiver() as second:
        created = keystone.call(
            "POST", SUBS, token=admin, json={"subscriber": "trust+" + first.url}
        )
        path = f"{SUBS}/{created.json['subscription_id']}"
        (old,) = keystone_server.trusts
        moved = keystone.call(
            "PATCH", path, token=admin, json={"subscriber": "trust+" + second.url}
        )
        assert moved.status_code == 204, moved.text
        (new,) = keystone_server.trusts
        assert new != old
        options = keystone.call("GET", path, token=admin).json["options"]
        assert options[TRUST_ID] == new and options[TRUSTOR_ID] == "u-admin"
        post_one(keystone, admin)
        dispatch_once(service, conf)
        (push,) = second.wait_for(1)
        assert keystone_server.trust_tokens[push.headers["X-Auth-Token"]] == new
        assert first.received == []
        assert keystone.call("DELETE", path, token=admin).status_code == 204
        assert keystone_server.trusts == {}


def test_a_trust_subscribed_before_trustors_were_recorded_is_checked_with_keystone(
    deployment: tuple[Keystone, Service, Path], keystone_server: KeystoneStandIn
) -> None:
    keystone, service, _ = deployment
    admin = user(keystone, keystone_server, "u-admin", "admin", "member", "reader")
    member = user(keystone, keystone_server, "u-member", "member", "reader")
    created = keystone.call("POST", SUBS, token=admin, json={"subscriber": "trust+http://a.test/x"})
    sid = created.json["subscription_id"]
    (trust_id,) = keystone_server.trusts
    # As an earlier release stored it: the trust's id, no trustor.
    store = service.stores.for_queue("p1", "q")
    store.delete_subscription("p1", "q", sid)
    legacy, _ = store.create_subscription(
        "p1",
        "q",
        NewSubscription("trust+http://a.test/x", 3600, {TRUST_ID: trust_id}, "s"),
        service.now_ms(),
    )
    path = f"{SUBS}/{legacy}"
    assert TRUSTOR_ID not in keystone.call("GET", path, token=admin).json["options"]
    refused = keystone.call(
        "PATCH", path, token=member, json={"subscriber": "trust+http://b.test/"}
    )
    assert refused.status_code == 403, refused.text
    assert keystone.call("DELETE", path, token=member).status_code == 403
    assert keystone.call("DELETE", path, token=admin).status_code == 204
    assert keystone_server.trusts == {}
