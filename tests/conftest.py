"""Shared fixtures: real stores (embedded Redis, a redis-server and secantusdb on loopback,
a real MongoDB when ZAQAR_DELAY_TEST_MONGODB_URL is set) and a fake clock. The servers come
from ``testbed``, the helpers that reach them from ``tests.helpers``."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.processes import RedisCluster, RedisSentinelGroup, RedisServer, SecantusServer
from testbed.shared import SharedServers
from testbed.swift_aio import SwiftAllInOne, missing_binaries
from tests.helpers.stores import (
    ACKED_CLUSTERS,
    STORES,
    close_test_driver,
    open_test_driver,
    races,
    store_url,
)
from zaqar_delay.clock import FakeClock
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.redis.embedded import EmbeddedRedis
from zaqar_delay.storage.redis.embedded_control import shut_down

# Tests with one of these markers are slow legs: tox -e slow runs them, tox -e fast leaves them.
SLOW_MARKERS = ("faults", "fuzz", "spark", "benchmark", "wallclock")


# The workers' input naming the directory of the servers they share (testbed.shared).
SHARED_SERVERS_INPUT = "zaqar_delay_shared_servers"
SHARED_SERVERS = pytest.StashKey[SharedServers]()
# Set by the run's first process to its temporary directory, for the workers it starts.
RUN_DIRECTORY_ENV = "_ZAQAR_DELAY_TEST_RUN"


# The run's temporary directory (the controller's), and whether the run passed.
RUN_DIRECTORY = pytest.StashKey[str]()
RUN_PASSED = pytest.StashKey[bool]()


def pytest_configure(config: pytest.Config) -> None:
    """The first process of a run makes one temporary directory for what the run makes
    (``TMPDIR``: its workers and the servers they start put their files there). Under
    pytest-xdist, the controller also makes the directory through which its workers share
    servers."""
    if os.environ.get(RUN_DIRECTORY_ENV):
        tempfile.tempdir = os.environ["TMPDIR"]  # a worker: its controller's, as TMPDIR says
    else:
        # pytest's tmp_path stays where pytest keeps it (its last three runs): the paths of
        # tests that bind sockets there have no room for a longer prefix.
        os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
        run = tempfile.mkdtemp(prefix="zd-run-")
        config.stash[RUN_DIRECTORY] = tempfile.tempdir = os.environ["TMPDIR"] = run
        os.environ[RUN_DIRECTORY_ENV] = run
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        config.stash[SHARED_SERVERS] = SharedServers(tempfile.mkdtemp(prefix="zd-shared-"))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[RUN_PASSED] = exitstatus == 0


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist's hook, on the controller, for each worker it starts."""
    shared = node.config.stash.get(SHARED_SERVERS, None)
    if shared is not None:
        node.workerinput[SHARED_SERVERS_INPUT] = str(shared.directory)


def pytest_unconfigure(config: pytest.Config) -> None:
    """On the controller, every worker done: stop the servers they shared, then remove the
    run's directory if the run passed (a failed run's files are kept, to be read)."""
    shared = config.stash.get(SHARED_SERVERS, None)
    if shared is not None:
        for name, record in shared.records():
            assert name == "swift", f"no way to stop the shared server {name}"
            SwiftAllInOne.stop_recorded(record)
        shutil.rmtree(shared.directory, ignore_errors=True)
    run = config.stash.get(RUN_DIRECTORY, None)
    if run is None:
        return
    if config.stash.get(RUN_PASSED, False):
        shutil.rmtree(run, ignore_errors=True)
    else:
        print(f"\nthe run's files (server logs, data directories) are kept in {run}")


def shared_servers(config: pytest.Config) -> SharedServers | None:
    """The servers this pytest-xdist worker shares with the others (None outside xdist)."""
    directory = getattr(config, "workerinput", {}).get(SHARED_SERVERS_INPUT)
    return None if directory is None else SharedServers(directory)


# First, so that pytest-xdist's own hook (which names each test's group) and ``-m`` see the
# markers added here.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith("tests/pipeline/"):
            item.add_marker(pytest.mark.spark)
            # One Spark session (a JVM per worker) serves the suite: its tests run in one worker.
            item.add_marker(pytest.mark.xdist_group("spark"))
        if any(item.get_closest_marker(name) for name in SLOW_MARKERS):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def embedded_redis() -> Iterator[EmbeddedRedis]:
    directory = tempfile.mkdtemp(prefix="zd-embedded-")
    server = EmbeddedRedis(os.path.join(directory, "test.db"))
    yield server
    # Whoever is still connected: close() alone would wait for test clients to leave.
    shut_down(server.directory, shared_grace_s=None)
    server.close()  # collects the exited redis-server


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    cluster = RedisCluster().start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[RedisSentinelGroup]:
    group = RedisSentinelGroup().start()
    yield group
    group.stop()


@pytest.fixture(scope="session")
def redis_cluster_with_replicas() -> Iterator[RedisCluster]:
    cluster = RedisCluster(masters=3, replicas=1).start()
    ACKED_CLUSTERS.add(cluster.url)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def secantus_server() -> Iterator[SecantusServer]:
    server = SecantusServer().start()
    yield server
    server.stop()


# The all-in-ones this process started for the others (referenced so they are not collected).
_STARTED_FOR_THE_RUN: list[SwiftAllInOne] = []


def _start_shared_swift() -> dict[str, Any]:
    # Two processes per server: one proxy process would serve every worker's requests in turn.
    aio = SwiftAllInOne(workers=2).start()
    _STARTED_FOR_THE_RUN.append(aio)
    return aio.record()


@pytest.fixture(scope="session")
def swift_aio(request: pytest.FixtureRequest) -> Iterator[SwiftAllInOne]:
    """A Swift all-in-one, one for the whole run: under pytest-xdist the first worker that
    needs it starts it, and the controller stops it. Tests use it without stopping or
    killing its servers (the fault tests start their own)."""
    missing = missing_binaries()
    if missing:
        pytest.skip(
            f"Swift's servers are needed ({', '.join(missing)} missing; .ci/run installs them)"
        )
    shared = shared_servers(request.config)
    if shared is not None:
        yield SwiftAllInOne.attach(shared.get("swift", _start_shared_swift))
        return
    aio = SwiftAllInOne().start()
    yield aio
    aio.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def short_tmp() -> Iterator[str]:
    """A temporary directory of a short path, for sockets (a socket's path must fit in about a
    hundred bytes, which pytest's own temporary paths may not)."""
    made = tempfile.mkdtemp(prefix="zd-")
    yield made
    shutil.rmtree(made, ignore_errors=True)


@pytest.fixture(params=STORES)
def store_uri(request: pytest.FixtureRequest) -> str:
    return store_url(request, request.param)


@pytest.fixture
def driver(request: pytest.FixtureRequest, store_uri: str) -> Iterator[Driver]:
    """A driver whose data no other test sees."""
    driver = open_test_driver(store_uri, racing=races(request))
    yield driver
    close_test_driver(driver)
