"""Request headers for gevent's WSGI handler, read without the ``email`` package.

gevent's handler parses each request's headers with ``http.client.parse_headers``, which
builds an ``email`` message through its feed parser: about a tenth of a worker's CPU under a
load of small requests, for what is a split on ``:`` per line. :class:`RequestHeaders` reads
the same lines under the same limits and answers the handful of calls the handler and
gunicorn make (``get``, ``getheader``, ``typeheader``, ``headers``, ``items``, ``del``).
"""

from __future__ import annotations

import errno
import functools
import json
import re
import socket
from collections.abc import Iterator
from typing import IO, Any

import gevent
from gevent.pywsgi import MAX_REQUEST_LINE
from gunicorn.workers.ggevent import PyWSGIHandler

from zaqar_delay.cmd.transfer import TimedInput, TransferTimer
from zaqar_delay.cmd.unsent import COUNTED_FROM_BYTES, UnsentResponses

# http.client's own limits: a longer line or more headers is a bad request.
MAX_LINE = 65536
MAX_HEADERS = 100
# Headers with environ entries of their own (CGI), not HTTP_*.
_OWN_ENTRIES = frozenset({"CONTENT_TYPE", "CONTENT_LENGTH"})
# RFC 9110's field line: a token, a colon, and a value of visible characters, spaces, tabs and
# obs-text. No other control character (NUL, a lone CR, ESC...) reaches the API, its logs or
# its stores.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
_OWS = " \t"  # the white space around a value
# Header names seen valid, so the usual ones are not checked again (bounded: a client may
# send names of its own).
_VALID_NAMES: set[str] = set()
_VALID_NAMES_KEPT = 512


class RequestHeaders:
    """A request's header fields in arrival order; lookups ignore case and find the first.

    ``status`` is empty for well-formed headers, else why they are not (gevent's handler
    answers 400 when it is set).
    """

    __slots__ = ("_fields", "_first", "status")

    def __init__(self, fields: list[tuple[str, str]], status: str = "") -> None:
        self._fields = fields
        self._first: dict[str, str] = {}
        for name, value in fields:
            self._first.setdefault(name.lower(), value)
        self.status = status

    @classmethod
    def read(cls, fp: IO[bytes]) -> RequestHeaders:
        """Read header lines from ``fp`` up to the empty line that ends them."""
        fields: list[tuple[str, str]] = []
        while True:
            line = fp.readline(MAX_LINE + 1)
            if len(line) > MAX_LINE:
                return cls([], "Line too long")
            if line in (b"\r\n", b"\n", b""):
                headers = cls(fields)
                headers.status = _framing_fault(headers._first, fields)
                return headers
            if len(fields) >= MAX_HEADERS:
                return cls([], f"got more than {MAX_HEADERS} headers")
            text = line.rstrip(b"\r\n").decode("iso-8859-1")
            if text[:1] in (" ", "\t"):
                if not fields or not _VALUE.fullmatch(text):
                    return cls([], f"malformed continuation line {text[:40]!r}")
                name, value = fields[-1]
                fields[-1] = (name, f"{value} {text.strip(_OWS)}")  # obsolete line folding
                continue
            name, colon, value = text.partition(":")
            # Quick yeses first: a name seen before; a value without tab or obs-text.
            if not (
                colon
                and (name in _VALID_NAMES or _valid_name(name))
                and (value.isprintable() or _VALUE.fullmatch(value))
            ):
                return cls([], f"malformed header line {text[:40]!r}")
            fields.append((name, value.strip(_OWS)))

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._first.get(name.lower(), default)

    getheader = get

    @property
    def typeheader(self) -> str | None:
        return self._first.get("content-type")

    @property
    def headers(self) -> Iterator[str]:
        """The fields as ``Name: value`` lines, which is how gevent builds the environ."""
        for name, value in self._fields:
            yield f"{name}: {value}\r\n"

    def items(self) -> list[tuple[str, str]]:
        return list(self._fields)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._first

    def __delitem__(self, name: str) -> None:
        lowered = name.lower()
        self._fields = [(n, v) for n, v in self._fields if n.lower() != lowered]
        self._first.pop(lowered, None)


def _valid_name(name: str) -> bool:
    """Whether ``name`` is an RFC 9110 token (remembered in ``_VALID_NAMES`` if so)."""
    if not _TOKEN.fullmatch(name):
        return False
    if len(_VALID_NAMES) < _VALID_NAMES_KEPT:
        _VALID_NAMES.add(name)
    return True


def _is_decimal(text: str) -> bool:
    """RFC 9112's Content-Length: decimal digits only (int() also takes "+5" and "2_5")."""
    return text.isdigit() and text.isascii()


def _framing_fault(first: dict[str, str], fields: list[tuple[str, str]]) -> str:
    """Why the body's framing is ambiguous ("" when it is not): a proxy in front may read it
    otherwise than gevent does, and the bytes one takes for the next request would be
    smuggled past it (RFC 9112 section 6). So a Content-Length is decimal digits, repeated
    only with the same value; a Transfer-Encoding is ``chunked`` alone; never both.
    ``first``: the fields by lower-case name, for the quick yes of the usual request (no
    Transfer-Encoding, one Content-Length of digits at most, no name twice at all)."""
    length = first.get("content-length")
    usual = length is None or _is_decimal(length)
    if usual and "transfer-encoding" not in first and len(first) == len(fields):
        return ""
    lengths: set[str] = set()
    codings: list[str] = []
    for name, field in fields:
        lowered = name.lower()
        if lowered == "content-length":
            lengths.update(length.strip() for length in field.split(","))
        elif lowered == "transfer-encoding":
            codings.append(field)
    if any(not _is_decimal(length) for length in lengths) or len(lengths) > 1:
        return "Content-Length is not one decimal number"
    if codings and [c.strip().lower() for c in codings] != ["chunked"]:
        return "the only Transfer-Encoding served is chunked"
    if codings and lengths:
        return "both Transfer-Encoding and Content-Length"
    return ""


# gevent's refusals of a request whose line or head cannot be read, with the API's JSON error
# body instead of an empty one: (reason phrase, title, description when the head gave none).
_REFUSALS = {
    "400": (
        "Bad Request",
        "Malformed request",
        "The request line or a header is not valid HTTP/1.1.",
    ),
    "414": (
        "URI Too Long",
        "Request line too long",
        f"The request line is longer than {MAX_REQUEST_LINE} bytes.",
    ),
}


def refusal(status: str, why: str) -> bytes:
    """The whole response refusing a request whose head could not be read: a JSON error
    (``title``, ``description``: ``why``, or what the status says) closing the connection."""
    phrase, title, default = _REFUSALS[status]
    description = f"{why[:1].upper()}{why[1:]}." if why else default
    body = json.dumps({"title": title, "description": description}).encode()
    head = (
        f"HTTP/1.1 {status} {phrase}\r\n"
        "Content-Type: application/json\r\n"
        "Connection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("ascii") + body


class Handler(PyWSGIHandler):  # type: ignore[misc]
    """gunicorn's gevent WSGI handler (access log, environ), reading headers as above.

    gevent's handler waits for a request for ever, and a connection holds one of the worker's
    ``worker_connections`` while it waits: clients that leave pooled connections open, or send
    a request a byte at a time, would end by taking them all. So a request's line and headers
    must arrive within the server's ``idle_s`` (gunicorn's ``keepalive``) of the connection
    going idle; otherwise the connection is closed (late headers answered 400 first). Then
    the body must arrive, and each response be taken, within the server's ``transfer_s``
    (cmd/transfer.py).

    When the worker stops (:meth:`stop_serving`), a connection waiting for a request is
    closed at once, and one in the middle of a request after its response, which says
    ``Connection: close``: gunicorn's worker waits for its connections to end before it exits,
    and clients keep pooled connections open for as long as the server lets them."""

    wsgi_input: Any  # gevent's body reader of the request, set by get_environ
    # A client too slow for the transfer timeout is not an error of the server's: its
    # connection is closed without a traceback in the log.
    ignored_socket_errors = (*PyWSGIHandler.ignored_socket_errors, errno.ETIMEDOUT)

    def __init__(self, sock: Any, address: Any, server: Any, *args: Any) -> None:
        super().__init__(sock, address, server, *args)
        # A server without the bounds (another gevent server) gets none.
        idle_s: float | None = getattr(server, "idle_s", None)
        transfer_s: float | None = getattr(server, "transfer_s", None)
        # One timer per connection, started when the connection waits for a request and
        # cancelled once its headers are read (a new gevent.Timeout per request costs four
        # times as much, on every request).
        self._timer = None if idle_s is None else gevent.Timeout(idle_s)
        # Bodies read and responses sent within ``transfer_s`` (cmd/transfer.py).
        self._transfer = None if transfer_s is None else TransferTimer(transfer_s)
        # The worker's count of the response bytes it sends (cmd/unsent.py), if it keeps one.
        self._unsent: UnsentResponses | None = getattr(server, "unsent", None)
        self._greenlet = gevent.getcurrent()
        self._awaiting_request = False  # in read_requestline, with nothing of a request read
        self._head_fault = ""  # why the current request's headers are refused, if they are
        # A connection accepted as the worker stopped gets an answer to what it already sent.
        self._stopping: bool = getattr(server, "closing", False)
        connections = getattr(server, "connections", None)
        if connections is not None:
            connections.add(self)

    def stop_serving(self) -> None:
        """Serve no request after the current one; close the connection now if it waits for
        one and no byte of it has arrived."""
        self._stopping = True
        if self._awaiting_request:
            self._close_soon()

    def _close_soon(self) -> None:
        # From the hub, where the handler's greenlet is parked, not running.
        gevent.get_hub().loop.run_callback(self._close_if_awaiting)

    def _close_if_awaiting(self) -> None:
        if not self._awaiting_request or self._timer is None or self._request_arriving():
            return
        # As when the connection's idle time runs out: read_requestline answers no request.
        self._greenlet.throw(self._timer)

    def _request_arriving(self) -> bool:
        raw = getattr(self.socket, "_sock", None)
        if raw is None:
            return True  # closed meanwhile, or not a socket to look into: leave it be
        try:
            return bool(raw.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        except BlockingIOError:
            return False
        except OSError:
            return True  # the handler's own read meets the error

    def handle_one_request(self) -> Any:
        self._head_fault = ""
        result = super().handle_one_request()
        if isinstance(result, tuple):  # gevent refused the head (400, 414): the whole answer
            status = str(result[0])
            return (status, refusal(status, self._head_fault)) if status in _REFUSALS else result
        return None if result is True and self._stopping else result

    def start_response(self, status: str, headers: list[tuple[str, str]], *args: Any) -> Any:
        if self._stopping and all(name.lower() != "connection" for name, _ in headers):
            headers = [*headers, ("Connection", "close")]
        return super().start_response(status, headers, *args)

    def read_requestline(self) -> str:
        timer = self._timer
        if timer is None:
            line: str = super().read_requestline()
            return line
        timer.start()
        self._awaiting_request = True
        if self._stopping:
            self._close_soon()
        try:
            line = super().read_requestline()
        except gevent.Timeout as timeout:
            timer.cancel()
            if timeout is not timer:
                raise
            return ""  # no request: the connection closes
        except BaseException:
            timer.cancel()
            raise
        finally:
            self._awaiting_request = False
        if not line or len(line) >= MAX_REQUEST_LINE:
            timer.cancel()  # gevent reads no headers for these
        return line

    def read_request(self, raw_requestline: str) -> bool:
        try:
            return bool(super().read_request(raw_requestline))
        finally:
            if self._timer is not None:
                self._timer.cancel()  # the head is read: the application's time is its own

    def MessageClass(self, fp: IO[bytes], *_: object) -> RequestHeaders:
        try:
            headers = RequestHeaders.read(fp)
        except gevent.Timeout as timeout:
            if timeout is not self._timer:
                raise
            headers = RequestHeaders([], "the request head was not received in time")
        self._head_fault = headers.status
        return headers

    def get_environ(self) -> dict[str, Any]:
        environ: dict[str, Any] = super().get_environ()
        transfer = self._transfer
        # Only a request that announces a body has one to wait for. An upgrade request's
        # input is the raw connection, for the protocol it switches to.
        if (
            transfer is not None
            and (self.content_length or "HTTP_TRANSFER_ENCODING" in environ)
            and environ["wsgi.input"] is self.wsgi_input
        ):
            self.wsgi_input = environ["wsgi.input"] = TimedInput(self.wsgi_input, transfer)
        return environ

    def handle_one_response(self) -> None:
        super().handle_one_response()
        if self._transfer is not None and self._transfer.expired:
            self.close_connection = True  # part of a body or of a response is lost

    def _sendall(self, data: bytes) -> None:
        transfer = self._transfer
        if transfer is None:
            super()._sendall(data)
        elif self._unsent is None or len(data) < COUNTED_FROM_BYTES:
            transfer.run(super()._sendall, data)
        else:
            with self._unsent.sending(len(data), functools.partial(transfer.cut, self._greenlet)):
                transfer.run(super()._sendall, data)

    def log_request(self) -> None:
        # gunicorn builds the access log's record (two datetimes, a response object, the
        # header list) before its logger looks whether there is an access log at all; the
        # server runs without one unless configured. (A gunicorn without the attribute logs.)
        if getattr(self.server.log, "access_log_enabled", True):
            super().log_request()

    def _headers(self) -> Iterator[tuple[str, str]]:
        """The request's ``HTTP_*`` environ entries, as gevent makes them (a name with an
        underscore is dropped, Content-Type and Content-Length have entries of their own),
        from the fields as read rather than from ``Name: value`` lines split again."""
        for name, value in self.headers.items():
            if "_" in name:
                continue
            key = name.replace("-", "_").upper()
            if key not in _OWN_ENTRIES:
                yield "HTTP_" + key, value
