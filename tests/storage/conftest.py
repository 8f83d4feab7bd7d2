"""The storage suites' stores: the contract modules also run pooled (``tests/storage/pooled.py``)
by parametrizing ``store_uri`` with ``CONTRACT_STORES``."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import STORES, close_test_driver, open_test_driver, store_url
from tests.storage.pooled import POOLED, pooled_driver
from tests.swift_aio import SwiftAllInOne
from zaqar_delay.storage.swift.connect import SwiftClient
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
    driver = open_test_driver(store_uri)
    yield driver
    close_test_driver(driver)


@pytest.fixture
def swift(swift_aio: SwiftAllInOne) -> Iterator[SwiftDriver]:
    """A Swift driver on a namespace of its own, on the all-in-one."""
    driver = open_test_driver(swift_aio.store_uri)
    assert isinstance(driver, SwiftDriver)
    yield driver
    close_test_driver(driver)


class SwiftRequests:
    """Counts the Swift requests every driver's client makes, by client method."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made: collections.Counter[str] = collections.Counter()
        call = SwiftClient._call

        def counted(client: SwiftClient, method: str, *args: Any, **kwargs: Any) -> Any:
            self.made[method] += 1
            return call(client, method, *args, **kwargs)

        monkeypatch.setattr(SwiftClient, "_call", counted)
