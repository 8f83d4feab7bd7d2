"""A real zaqar-delay-server under gunicorn, on the embedded store, a redis-server, a Redis
Cluster, MongoDB's wire protocol and a Swift all-in-one."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

import pytest

from testbed.processes import RedisCluster, RedisServer, SecantusServer, ServiceProcess
from testbed.swift_aio import SwiftAllInOne, missing_binaries
from tests.helpers.faults import Store
from tests.helpers.stores import secantus_of_its_own
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
    """This suite's own secantusdb (tests.helpers.stores.secantus_of_its_own says why)."""
    yield from secantus_of_its_own()


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


@pytest.fixture(params=["redis-aof", "mongodb", "swift"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    if request.param == "swift":
        if missing_binaries():
            pytest.skip(f"Swift's servers are needed ({', '.join(missing_binaries())})")
        swift = SwiftAllInOne().start()
        yield Store(swift, swift.store_uri)
        swift.stop()
        return
    if request.param == "redis-aof":
        # always: with everysec Redis may answer writes it has not written yet while a slow
        # fsync runs (doc/source/manual/durability.rst), which this test is not about.
        redis = RedisServer(aof=True, extra_args=["--appendfsync", "always"]).start()
        yield Store(redis, redis.url)
        redis.stop()
        return
    path = tempfile.mkdtemp(prefix="zd-secantus-")
    mongo = SecantusServer(storage_path=path, durable=True).start()
    yield Store(mongo, mongo.database_url("zaqar_delay_faults"))
    mongo.stop()
