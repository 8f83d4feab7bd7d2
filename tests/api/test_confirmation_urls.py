"""Under keystone, as in Zaqar, a confirmation request names its URLs at the public endpoints
of Zaqar's services in Keystone's catalog (``WSGISubscribeURL``, ``WebSocketSubscribeURL``),
read with the ``[keystone_authtoken]`` service user's credentials, and a confirmation page's
link carries the first as ``Url``. A catalog that names none, or a Keystone that refuses the
service user, leaves them out and the request is sent all the same.

keystonemiddleware validates the user's token (its AuthTokenFixture); the service user's
authentication goes to a Keystone v3 stand-in (``testbed/keystone_standin.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.smtp import Envelope

from testbed.keystone_standin import KeystoneStandIn
from testbed.receiver import receiver
from tests.helpers.keystone import SERVICE_PASSWORD, SERVICE_USER, SUBS, Keystone, keystone_app
from tests.helpers.mail import PAGE, link_in, mail_number
from zaqar_delay.storage.redis.embedded import EmbeddedRedis

API = "https://cloud.example.com/messaging"
WEBSOCKET = "wss://cloud.example.com:9000"


def service(name: str, kind: str, *endpoints: tuple[str, str]) -> dict[str, Any]:
    """A catalog entry: service ``name`` of type ``kind``, its (interface, url) endpoints."""
    return {
        "type": kind,
        "name": name,
        "id": name,
        "endpoints": [
            {"id": f"{name}-{interface}", "interface": interface, "url": url, "region": "r1"}
            for interface, url in endpoints
        ],
    }


ZAQAR = service("zaqar", "messaging", ("internal", "http://10.0.0.5:8888"), ("public", API))
ZAQAR_WEBSOCKET = service("zaqar-websocket", "messaging-websocket", ("public", WEBSOCKET))


def conf_for(keystone_server: KeystoneStandIn, smtp_port: int, password: str) -> str:
    """The service user in ``[keystone_authtoken]`` (continuing its section), and Zaqar's
    confirmation on."""
    return (
        f"auth_type = password\nauth_url = {keystone_server.url}\nusername = {SERVICE_USER}\n"
        f"password = {password}\nuser_domain_id = default\n"
        "project_name = service\nproject_domain_id = default\n"
        "[notification]\nrequire_confirmation = true\nallowed_networks = 127.0.0.0/8\n"
        f"smtp_host = 127.0.0.1\nsmtp_port = {smtp_port}\nexternal_confirmation_url = {PAGE}\n"
        f"[signed_url]\nsecret_key = {'s' * 32}\n"
    )


@pytest.fixture
def keystone_with(
    tmp_path: Path,
    embedded_redis: EmbeddedRedis,
    keystone_server: KeystoneStandIn,
    smtp_inbox: tuple[int, list[Envelope]],
) -> Iterator[Any]:
    """Starts the app with the service user's ``password``."""
    apps: list[Iterator[Any]] = []

    def start(password: str = SERVICE_PASSWORD) -> Keystone:
        extra = conf_for(keystone_server, smtp_inbox[0], password)
        apps.append(keystone_app(tmp_path, embedded_redis, extra))
        keystone, _ = next(apps[-1])
        return keystone

    yield start
    for app in apps:
        app.close()


def subscribe(keystone: Keystone, subscriber: str) -> str:
    created = keystone.call(
        "POST", SUBS, token=keystone.token("p1"), json={"subscriber": subscriber}
    )
    assert created.status_code == 201, created.text
    return str(created.json["subscription_id"])


def service_user_authentications(keystone_server: KeystoneStandIn) -> int:
    return sum(
        r["auth"]["identity"]["password"]["user"]["name"] == SERVICE_USER
        for r in keystone_server.requests
    )


def test_a_confirmation_names_its_urls_at_the_public_endpoints_in_the_catalog(
    keystone_with: Any, keystone_server: KeystoneStandIn, smtp_inbox: tuple[int, list[Envelope]]
) -> None:
    keystone_server.services = [ZAQAR, ZAQAR_WEBSOCKET]
    keystone = keystone_with()
    with receiver() as hook:
        sid = subscribe(keystone, hook.url)
        [request] = hook.wait_for(1)
    document = request.json()
    path = f"/v2/queues/q/subscriptions/{sid}/confirm"
    assert document["URL-Paths"] == path
    # The public endpoint (not the internal one), its own path kept.
    assert document["WSGISubscribeURL"] == API + path
    assert document["WebSocketSubscribeURL"] == WEBSOCKET + path
    assert service_user_authentications(keystone_server) == 1
    # A mail's link to the confirmation page carries it as Url; the catalog is read once.
    mailed = subscribe(keystone, "mailto:o@ex.com")
    _, query = link_in(mail_number(smtp_inbox[1], 1).get_content())
    assert query["Url"] == f"{API}/v2/queues/q/subscriptions/{mailed}/confirm"
    assert service_user_authentications(keystone_server) == 1


def test_until_the_catalog_names_zaqar_a_confirmation_names_no_url(
    keystone_with: Any, keystone_server: KeystoneStandIn
) -> None:
    keystone = keystone_with()
    with receiver() as hook:
        subscribe(keystone, hook.url)
        first = hook.wait_for(1)[0].json()
        assert first["Message_Type"] == "SubscriptionConfirmation"
        assert "WSGISubscribeURL" not in first and "WebSocketSubscribeURL" not in first
        # Registered later: the next confirmation looks again, and finds it.
        keystone_server.services = [ZAQAR]
        sid = subscribe(keystone, hook.url + "/second")
        second = hook.wait_for(2)[1].json()
    assert second["WSGISubscribeURL"] == f"{API}/v2/queues/q/subscriptions/{sid}/confirm"
    assert "WebSocketSubscribeURL" not in second
    assert service_user_authentications(keystone_server) == 2


def test_a_service_user_keystone_refuses_leaves_the_urls_out(
    keystone_with: Any, keystone_server: KeystoneStandIn, caplog: pytest.LogCaptureFixture
) -> None:
    keystone_server.services = [ZAQAR]
    keystone = keystone_with(password="wrong")
    with receiver() as hook:
        sid = subscribe(keystone, hook.url)
        [request] = hook.wait_for(1)
    assert service_user_authentications(keystone_server) == 1  # tried, and refused
    assert "confirmation requests name no URL" in caplog.text
    document = request.json()
    assert document["URL-Paths"] == f"/v2/queues/q/subscriptions/{sid}/confirm"
    assert "WSGISubscribeURL" not in document
