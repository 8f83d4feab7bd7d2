"""A real zaqar-delay-server under gunicorn, on the embedded store and on a redis-server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.processes import RedisServer, ServiceProcess
from zaqar_delay.conf import STORAGE_URI_ENV


@pytest.fixture(scope="session")
def embedded_service() -> Iterator[ServiceProcess]:
    service = ServiceProcess().start()
    yield service
    service.stop()


@pytest.fixture(scope="session")
def external_service(redis_server: RedisServer) -> Iterator[ServiceProcess]:
    service = ServiceProcess(env={STORAGE_URI_ENV: redis_server.url}).start()
    yield service
    service.stop()


@pytest.fixture(params=["embedded", "redis-server"])
def service(request: pytest.FixtureRequest) -> ServiceProcess:
    name = "embedded_service" if request.param == "embedded" else "external_service"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]
