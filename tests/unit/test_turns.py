"""api/turns.py: the app works on a request during a turn of its project, with the body
received before the turn (the same bytes, or the same failure), and the turn over once the
response is made."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from zaqar_delay.admission import Admission
from zaqar_delay.api.turns import received_first, with_turns


class CountedInput(io.BytesIO):
    """A body reader that records the sizes asked for."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.asked: list[int | None] = []

    def read(self, size: int | None = -1) -> bytes:
        self.asked.append(size)
        return super().read(size)


class BrokenInput:
    def read(self, *_: Any) -> bytes:
        raise OSError("unexpected end of file while reading request at position 3")


def environ(body: Any, **entries: Any) -> dict[str, Any]:
    return {"wsgi.input": body, **entries}


def test_a_declared_body_is_received_whole_first() -> None:
    body = CountedInput(b'{"messages": []}')
    env = environ(body, CONTENT_LENGTH="16")
    received_first(env, 100)
    assert body.asked == [16]
    assert env["wsgi.input"] is not body and env["wsgi.input"].read(100) == b'{"messages": []}'


def test_a_body_declared_longer_than_any_route_takes_is_left_unread() -> None:
    body = CountedInput(b"x" * 200)
    env = environ(body, CONTENT_LENGTH="200")
    received_first(env, 100)
    assert body.asked == [] and env["wsgi.input"] is body


@pytest.mark.parametrize("length", ["", "0", "-1", "ten"])
def test_no_body_or_a_length_the_app_refuses_is_not_read(length: str) -> None:
    body = CountedInput(b"")
    env = environ(body, CONTENT_LENGTH=length)
    received_first(env, 100)
    assert body.asked == [] and env["wsgi.input"] is body


def test_a_chunked_body_is_received_up_to_one_past_the_largest() -> None:
    body = CountedInput(b"y" * 500)
    env = environ(body, **{"wsgi.input_terminated": True})
    received_first(env, 100)
    assert body.asked == [101]
    assert env["wsgi.input"].read(1000) == b"y" * 101  # the route finds it too large


def test_a_body_that_failed_fails_the_apps_read_the_same() -> None:
    env = environ(BrokenInput(), CONTENT_LENGTH="10")
    received_first(env, 100)
    with pytest.raises(OSError, match="unexpected end of file"):
        env["wsgi.input"].read(10)
    with pytest.raises(OSError, match="unexpected end of file"):
        env["wsgi.input"].readline()


def test_the_app_works_in_a_turn_of_the_requests_project_that_ends_with_the_response() -> None:
    admission = Admission(1)
    seen: list[tuple[int, bytes]] = []

    def app(env: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        seen.append((admission.working, env["wsgi.input"].read(5)))
        start_response("201 Created", [])
        return [b"made"]

    wrapped = with_turns(app, admission, 100)
    env = environ(CountedInput(b"hello"), CONTENT_LENGTH="5", HTTP_X_PROJECT_ID="p")
    assert list(wrapped(env, lambda *_: None)) == [b"made"]
    assert seen == [(1, b"hello")]
    assert admission.working == 0
