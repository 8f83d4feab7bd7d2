"""Requests take turns at work (:mod:`zaqar_delay.admission`), each in its project's line.

A request's body is received before its turn: a client that sends its body slowly would
otherwise hold a turn, one of the few a process has, for as long as the server waits for
the body (``[server] transfer_timeout``), and a handful of such clients would hold all.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from typing import Any

from zaqar_delay.admission import Admission
from zaqar_delay.keystone.auth_token import WSGIApp


def with_turns(app: WSGIApp, admission: Admission, largest_body: int) -> WSGIApp:
    """``app`` working on each request during a turn of the request's project, as
    ``X-Project-ID`` names it once authentication has set it (behind ``protect``: the
    token's project under keystone).

    Before the turn the request's body is received whole, when it is no longer than
    ``largest_body`` (the largest any route takes; one past it when its length is not
    declared, so a route refuses it as too large). The turn ends once ``app`` has made the
    response: sending it is not work, so a client slow to read holds no turn either."""

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        received_first(environ, largest_body)
        with admission.turn(str(environ.get("HTTP_X_PROJECT_ID", ""))):
            return app(environ, start_response)

    return application


def received_first(environ: dict[str, Any], largest: int) -> None:
    """Receive the body of the request ``environ`` describes, and give ``wsgi.input`` as
    what was received: the same bytes, or the same failure (a body that ended short or did
    not arrive in time fails the app's read as it would have). A body declared longer than
    ``largest`` is left unread, for the route to refuse without reading it."""
    size = _to_receive(environ, largest)
    if not size:
        return
    try:
        received = environ["wsgi.input"].read(size)
    except OSError as failure:
        environ["wsgi.input"] = _FailedBody(failure)
        return
    environ["wsgi.input"] = io.BytesIO(received)


def _to_receive(environ: dict[str, Any], largest: int) -> int:
    """Bytes to read of the request's body: its declared length, or ``largest + 1`` for a
    body of undeclared length that the server ends (a chunked one); 0 for none."""
    declared = str(environ.get("CONTENT_LENGTH") or "")
    if declared:
        length = int(declared) if declared.isdigit() else 0
        return length if length <= largest else 0
    return largest + 1 if environ.get("wsgi.input_terminated") else 0


class _FailedBody:
    """A body whose reading failed before the app's turn: the app's reads fail the same."""

    def __init__(self, failure: OSError) -> None:
        self._failure = failure

    def read(self, *_: Any) -> bytes:
        raise self._failure

    readline = read
