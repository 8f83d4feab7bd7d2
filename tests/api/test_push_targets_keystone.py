"""Push targets under keystone: any tenant of a cloud may subscribe, so by default pushes may
not reach the operator's own networks (loopback, RFC 1918, CGNAT, unique-local IPv6) nor any
address of the server's machine; only ``[notification] allowed_networks`` reopens them.

Each test first shows that the address is a valid target where these defaults do not apply
(noauth's lists, or an operator who allowed it), then that keystone refuses it: at subscribe
time with a 400, and at connect time for a subscription stored while it was allowed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import netns
from testbed.receiver import receiver
from tests.helpers.keystone import Keystone, keystone_app
from tests.helpers.push import senders
from zaqar_delay.api.app import push_guard
from zaqar_delay.conf import Settings, load_settings
from zaqar_delay.push.dispatcher import Dispatcher
from zaqar_delay.push.guard import tenant_guard
from zaqar_delay.service import Service
from zaqar_delay.storage.redis.embedded import EmbeddedRedis

SUBS = "/v2/queues/q/subscriptions"
KEYSTONE = "[server]\nauth_strategy = keystone\n"
ALLOW_LOOPBACK = "[notification]\nallowed_networks = 127.0.0.0/8\n"

OPERATOR_ADDRESSES = [
    "127.0.0.1",
    "127.9.9.9",
    "[::1]",
    "10.1.2.3",
    "172.16.5.4",
    "172.31.255.1",
    "192.168.1.1",
    "100.64.0.1",
    "100.127.255.254",
    "[fc00::1]",
    "[fd12:3456::1]",
    "[::ffff:10.1.2.3]",  # the IPv4-mapped form of a private address
]


def settings_of(tmp_path: Path, text: str) -> Settings:
    conf = tmp_path / "push-targets.conf"
    conf.write_text(text)
    return load_settings([str(conf)])


@pytest.fixture
def tenants(tmp_path: Path, embedded_redis: EmbeddedRedis) -> Iterator[Keystone]:
    """Keystone with the default push lists."""
    for keystone, _ in keystone_app(tmp_path, embedded_redis, ""):
        yield keystone


@pytest.fixture
def loopback_allowed(
    tmp_path: Path, embedded_redis: EmbeddedRedis
) -> Iterator[tuple[Keystone, Service]]:
    """Keystone where the operator reopened loopback."""
    yield from keystone_app(tmp_path, embedded_redis, ALLOW_LOOPBACK)


def subscribe(keystone: Keystone, subscriber: str) -> tuple[int, dict[str, str]]:
    answer = keystone.call(
        "POST",
        SUBS,
        token=keystone.token("p1"),
        json={"subscriber": subscriber, "ttl": 3600},
    )
    return answer.status_code, answer.json


@pytest.mark.parametrize("address", OPERATOR_ADDRESSES)
def test_under_keystone_a_tenant_cannot_subscribe_the_operators_networks(
    tenants: Keystone, address: str
) -> None:
    # Where every subscriber is the operator's (noauth, today's lists), it is a target.
    assert tenant_guard((), (), strangers=False).permits(address)
    status, body = subscribe(tenants, f"http://{address}:8080/hook")
    assert status == 400, body
    assert "pushes may not reach" in body["description"]
    listed = tenants.call("GET", SUBS, token=tenants.token("p1")).json["subscriptions"]
    assert listed == []


def test_under_keystone_a_name_of_this_machine_is_refused_and_public_addresses_are_not(
    tenants: Keystone,
) -> None:
    status, body = subscribe(tenants, "http://localhost:8080/hook")
    assert status == 400, body
    assert "localhost resolves to" in body["description"]
    for public in ("http://203.0.113.9/hook", "https://[2001:db8::9]/hook"):
        status, body = subscribe(tenants, public)
        assert status == 201, (public, body)


def test_allowed_networks_reopens_only_what_it_names(
    loopback_allowed: tuple[Keystone, Service],
) -> None:
    keystone, _ = loopback_allowed
    assert subscribe(keystone, "http://127.0.0.1:8080/hook")[0] == 201
    status, body = subscribe(keystone, "http://10.1.2.3:8080/hook")
    assert status == 400, body


def test_a_stored_subscription_to_loopback_is_refused_when_the_push_connects(
    tmp_path: Path, loopback_allowed: tuple[Keystone, Service]
) -> None:
    keystone, service = loopback_allowed
    token = keystone.token("p1")
    with receiver() as hook:
        created = keystone.call(
            "POST", SUBS, token=token, json={"subscriber": hook.url, "ttl": 3600}
        )
        assert created.status_code == 201, created.text
        sid = created.json["subscription_id"]
        post = {"messages": [{"body": {"n": 1}}]}
        posted = keystone.call("POST", "/v2/queues/q/messages", token=token, json=post)
        assert posted.status_code == 201, posted.text
        # The operator then closes loopback again (the keystone default): the push, due
        # now, is refused before any connection is made.
        closed = push_guard(settings_of(tmp_path, KEYSTONE))
        dispatcher = Dispatcher(service, senders(closed), concurrency=2)
        try:
            assert dispatcher.run_once() == 1
        finally:
            dispatcher.stop()
        assert hook.received == []
        shown = keystone.call("GET", f"{SUBS}/{sid}", token=token).json["last_delivery"]
        assert shown["outcome"] == "permanent"
        # Through the guard of the operator who allows it, the same push arrives.
        reopened = push_guard(settings_of(tmp_path, KEYSTONE + ALLOW_LOOPBACK))
        keystone.call("POST", "/v2/queues/q/messages", token=token, json=post)
        dispatcher = Dispatcher(service, senders(reopened), concurrency=2)
        try:
            assert dispatcher.run_once() == 1
        finally:
            dispatcher.stop()
        assert [r.json()["body"] for r in hook.wait_for(1)] == [{"n": 1}]


# Run inside a namespace: the guard's view of an address this machine has from the start,
# and of one added while it runs.
OWN_ADDRESSES_SCRIPT = textwrap.dedent(
    """
    import json, subprocess
    from zaqar_delay.push.guard import OwnAddresses, parse, tenant_guard
    keystone = tenant_guard((), (), strangers=True)
    noauth = tenant_guard((), (), strangers=False)
    own = OwnAddresses(refresh_s=0)
    found = {
        "keystone": keystone.permits("198.51.100.7"),
        "noauth": noauth.permits("198.51.100.7"),
        "added_before": parse("198.51.100.8") in own(),
    }
    subprocess.run(["ip", "addr", "add", "198.51.100.8/32", "dev", "lo"], check=True)
    found["added_after"] = parse("198.51.100.8") in own()
    print(json.dumps(found))
    """
)


@pytest.mark.skipif(not netns.available(), reason="network namespaces need root and ip")
def test_under_keystone_the_machines_own_public_address_is_refused() -> None:
    with netns.Link() as link:
        netns.ip(*link.prefix[1:], "ip", "addr", "add", "198.51.100.7/32", "dev", "lo")
        ran = subprocess.run(
            [*link.prefix, sys.executable, "-c", OWN_ADDRESSES_SCRIPT],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert ran.returncode == 0, ran.stderr
    found = json.loads(ran.stdout)
    # A public address: noauth's lists let pushes reach it; it is the machine's own, so
    # keystone's do not.
    assert found["noauth"] is True
    assert found["keystone"] is False
    # An address added while the service runs is seen once the list is read again.
    assert found == {**found, "added_before": False, "added_after": True}
