"""A real zaqar-delay-server under gunicorn, on the embedded store, a redis-server, a Redis
Cluster, MongoDB's wire protocol and a Swift all-in-one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.processes import RedisCluster, RedisServer, SecantusServer, ServiceProcess
from tests.swift_aio import SwiftAllInOne
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


@pytest.fixture(scope="session")
def cluster_service(redis_cluster: RedisCluster) -> Iterator[ServiceProcess]:
    service = ServiceProcess(env={STORAGE_URI_ENV: redis_cluster.url}).start()
    yield service
    service.stop()


@pytest.fixture(scope="session")
def secantus_server() -> Iterator[SecantusServer]:
    """The functional suite's own secantusdb. Servers stopped with requests and change
    streams open can leave secantusdb (a test-only server) stuck; a separate instance keeps
    that from reaching the storage and API suites."""
    server = SecantusServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def mongodb_service(secantus_server: SecantusServer) -> Iterator[ServiceProcess]:
    uri = secantus_server.database_url("zaqar_delay_functional")
    service = ServiceProcess(env={STORAGE_URI_ENV: uri}).start()
    yield service
    service.stop()


@pytest.fixture(scope="session")
def swift_service(swift_aio: SwiftAllInOne) -> Iterator[ServiceProcess]:
    service = ServiceProcess(env={STORAGE_URI_ENV: swift_aio.store_uri}).start()
    yield service
    service.stop()


SERVICES = {
    "embedded": "embedded_service",
    "redis-server": "external_service",
    "redis-cluster": "cluster_service",
    "mongodb": "mongodb_service",
    "swift": "swift_service",
}


@pytest.fixture(params=list(SERVICES))
def service(request: pytest.FixtureRequest) -> ServiceProcess:
    return request.getfixturevalue(SERVICES[request.param])  # type: ignore[no-any-return]
