"""The API under keystonemiddleware, against a Keystone v3 stand-in."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import falcon.testing
from keystonemiddleware.fixture import AuthTokenFixture

from testbed.keystone_standin import KeystoneStandIn
from tests.helpers.push import senders
from tests.helpers.stores import close_test_driver, open_test_driver
from zaqar_delay.api.app import build, push_trusts
from zaqar_delay.api.auth import protect
from zaqar_delay.clock import FakeClock
from zaqar_delay.conf import load_settings
from zaqar_delay.push.dispatcher import Dispatcher
from zaqar_delay.push.guard import AddressGuard
from zaqar_delay.service import Service
from zaqar_delay.storage.redis.embedded import EmbeddedRedis

CLIENT = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c"}

IMPLIED_ROLES = {"admin": ("member",), "member": ("reader",)}


class Keystone:
    def __init__(self, client: falcon.testing.TestClient, tokens: AuthTokenFixture) -> None:
        self.client = client
        self.tokens = tokens

    def token(self, project: str, *roles: str, expires: datetime.datetime | None = None) -> str:
        """A token of ``project`` with ``roles`` (default: member) and the roles they imply,
        as keystone's bootstrap roles do (admin implies member, member implies reader),
        valid until ``expires`` (default: keystone's, an hour)."""
        token_id = uuid.uuid4().hex
        granted = list(roles) or ["member"]
        for role in granted:
            granted.extend(r for r in IMPLIED_ROLES.get(role, ()) if r not in granted)
        self.tokens.add_token_data(
            token_id=token_id,
            project_id=project,
            user_id="u-" + project,
            role_list=granted,
            expires=expires,
        )
        return token_id

    def call(
        self,
        method: str,
        path: str,
        token: str | None = None,
        headers: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> falcon.testing.Result:
        headers = {**CLIENT, **(headers or {})}
        if token is not None:
            headers["X-Auth-Token"] = token
        return self.client.simulate_request(method, path, headers=headers, **kwargs)


KEYSTONE_CONF = (
    "[server]\nauth_strategy = keystone\n"
    "[keystone_authtoken]\nwww_authenticate_uri = http://127.0.0.1:5000/v3\n"
    "delay_auth_decision = false\n"
)


def keystone_app(
    tmp_path: Path, embedded_redis: EmbeddedRedis, extra_conf: str
) -> Iterator[tuple[Keystone, Service]]:
    """The app behind keystonemiddleware on the embedded store, with ``extra_conf``, and the
    service it serves."""
    conf = tmp_path / "zaqar-delay.conf"
    conf.write_text(KEYSTONE_CONF + extra_conf)
    settings = load_settings([str(conf)])
    driver = open_test_driver(str(embedded_redis.uri))
    tokens = AuthTokenFixture()
    tokens.setUp()
    clock = FakeClock()
    app, service = build(settings, driver=driver, clock=clock)
    try:
        yield Keystone(falcon.testing.TestClient(protect(app, settings, clock)), tokens), service
    finally:
        tokens.cleanUp()
        service.stores.close()
        close_test_driver(driver)


SUBS = "/v2/queues/q/subscriptions"


SERVICE_USER, SERVICE_PASSWORD = "zaqar-delay", "service-secret"

#: ``[keystone_authtoken]`` of a server that only ever refuses requests without a token: the
#: service user that would check a token is named (the server needs one to start) and never
#: reached.
TOKENLESS_ONLY = (
    "[keystone_authtoken]\nwww_authenticate_uri = http://127.0.0.1:5000/v3\n"
    "delay_auth_decision = false\nauth_type = password\nauth_url = http://127.0.0.1:5000/v3\n"
    f"username = {SERVICE_USER}\npassword = {SERVICE_PASSWORD}\nuser_domain_id = default\n"
    "project_name = service\nproject_domain_id = default\n"
)


def trustee_conf(keystone_server: KeystoneStandIn) -> str:
    return (
        "[trustee]\nauth_type = password\n"
        f"auth_url = {keystone_server.url}\nusername = {SERVICE_USER}\n"
        f"password = {SERVICE_PASSWORD}\nuser_domain_id = default\n"
        "[notification]\nallowed_networks = 127.0.0.0/8\n"
    )


def dispatch_once(service: Service, conf: Path) -> None:
    trusts = push_trusts(load_settings([str(conf)]))
    assert trusts is not None
    dispatcher = Dispatcher(service, senders(AddressGuard(), trusts=trusts), concurrency=2)
    try:
        assert dispatcher.run_once() == 1
    finally:
        dispatcher.stop()
