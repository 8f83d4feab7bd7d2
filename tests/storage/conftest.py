"""The storage suites' stores: the contract modules also run pooled (``tests/helpers/pooled.py``)
by parametrizing ``store_uri`` with ``CONTRACT_STORES``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from testbed.swift_aio import SwiftAllInOne, missing_binaries
from tests.helpers.pooled import POOLED, pooled_driver
from tests.helpers.stores import STORES, close_test_driver, open_test_driver, races, store_url
from zaqar_delay.storage.mongodb.driver import MongoDriver
from zaqar_delay.storage.swift.driver import SwiftDriver


@pytest.fixture(params=STORES)
def store_uri(request: pytest.FixtureRequest) -> str:
    """A running store's URI, or ``POOLED``."""
    return POOLED if request.param == POOLED else store_url(request, request.param)


@pytest.fixture
def driver(request: pytest.FixtureRequest, store_uri: str) -> Iterator[Any]:
    """A driver on a namespace no other test sees; pooled: a PooledDriver."""
    if store_uri == POOLED:
        yield from pooled_driver(request)
        return
    driver = open_test_driver(store_uri, racing=races(request))
    yield driver
    close_test_driver(driver)


@pytest.fixture
def swift(request: pytest.FixtureRequest, swift_aio: SwiftAllInOne) -> Iterator[SwiftDriver]:
    """A Swift driver on a namespace of its own, on the all-in-one."""
    driver = open_test_driver(swift_aio.store_uri, racing=races(request))
    assert isinstance(driver, SwiftDriver)
    yield driver
    close_test_driver(driver)


@pytest.fixture
def mongo(request: pytest.FixtureRequest) -> Iterator[MongoDriver]:
    """A MongoDB driver on a namespace of its own (secantusdb, or a real MongoDB)."""
    driver = open_test_driver(store_url(request, "mongodb"))
    assert isinstance(driver, MongoDriver)
    yield driver
    close_test_driver(driver)


@pytest.fixture(scope="module")
def three_replicas() -> Iterator[SwiftAllInOne]:
    """A Swift all-in-one keeping three copies of every object, one per device."""
    missing = missing_binaries()
    if missing:
        pytest.skip(f"Swift's servers are needed ({', '.join(missing)} missing)")
    aio = SwiftAllInOne(replicas=3).start()
    yield aio
    aio.stop()
