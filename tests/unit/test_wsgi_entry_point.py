"""The external-gunicorn entry point builds its app once, however many requests arrive while it
is being built."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest

from zaqar_delay.api import wsgi


@pytest.fixture
def slow_build(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The app build takes 0.2 s (as opening a store does); the list counts the builds."""
    builds: list[int] = []

    def build() -> Callable[..., Iterable[bytes]]:
        builds.append(1)
        time.sleep(0.2)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
            start_response("204 No Content", [])
            return [b""]

        return app

    monkeypatch.setattr(wsgi, "_app", None)
    monkeypatch.setattr(wsgi, "_build", build)
    yield builds


def test_requests_that_arrive_together_build_one_app(slow_build: list[int]) -> None:
    statuses: list[str] = []
    requests = [
        threading.Thread(
            target=lambda: wsgi.application({}, lambda status, headers: statuses.append(status))
        )
        for _ in range(8)
    ]
    for request in requests:
        request.start()
    for request in requests:
        request.join(10)
    assert statuses == ["204 No Content"] * 8
    assert slow_build == [1]
