"""The API under falcon's test client, on the embedded Redis with a fake clock."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import Envelope
from keystonemiddleware.fixture import AuthTokenFixture

from testbed.keystone_standin import KeystoneStandIn
from testbed.processes import SecantusServer, free_port
from tests.helpers.api import API_STORES, Api, api_of
from tests.helpers.keystone import SERVICE_PASSWORD, SERVICE_USER
from tests.helpers.oslo import Deployment
from tests.helpers.stores import close_test_driver, open_test_driver, secantus_of_its_own
from zaqar_delay.api.app import create_wsgi_app
from zaqar_delay.clock import FakeClock
from zaqar_delay.conf import load_settings
from zaqar_delay.storage.redis.embedded import EmbeddedRedis


@pytest.fixture(params=API_STORES)
def api(request: pytest.FixtureRequest) -> Iterator[Api]:
    """The API on each kind of driver (the contract suite covers every store), and pooled:
    queues spread over a Redis and a MongoDB pool."""
    yield from api_of(request)


@pytest.fixture
def smtp_inbox() -> Iterator[tuple[int, list[Envelope]]]:
    """An SMTP server on a loopback port: its port, and the mails it received."""
    received: list[Envelope] = []

    class Inbox:
        async def handle_DATA(self, server: object, session: object, envelope: Envelope) -> str:
            received.append(envelope)
            return "250 OK"

    port = free_port()
    smtp = Controller(Inbox(), hostname="127.0.0.1", port=port)
    smtp.start()
    yield port, received
    smtp.stop()


@pytest.fixture
def keystone_server() -> Iterator[KeystoneStandIn]:
    server = KeystoneStandIn({SERVICE_USER: SERVICE_PASSWORD}, lambda: "unused", []).start()
    yield server
    server.stop()


@pytest.fixture
def deploy(tmp_path: Path, embedded_redis: EmbeddedRedis) -> Iterator[Callable[[str], Deployment]]:
    """Builds a deployment from configuration text (with keystone when it says so)."""
    opened: list[tuple[Any, AuthTokenFixture | None]] = []

    def build(text: str) -> Deployment:
        conf = tmp_path / f"oslo-{len(opened)}.conf"
        conf.write_text(text)
        settings = load_settings([str(conf)])
        tokens = None
        if settings.server.auth_strategy == "keystone":
            tokens = AuthTokenFixture()
            tokens.setUp()
        driver = open_test_driver(str(embedded_redis.uri))
        opened.append((driver, tokens))
        app = create_wsgi_app(settings, driver=driver, clock=FakeClock())
        return Deployment(app, tokens)

    yield build
    for driver, tokens in opened:
        if tokens is not None:
            tokens.cleanUp()
        close_test_driver(driver)


@pytest.fixture(scope="session")
def secantus_server() -> Iterator[SecantusServer]:
    """This suite's own secantusdb (tests.helpers.stores.secantus_of_its_own says why)."""
    yield from secantus_of_its_own()
