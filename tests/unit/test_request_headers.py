"""The request-header reader the server's gevent handler uses instead of ``http.client``."""

from __future__ import annotations

import http.client
import io

import pytest

from zaqar_delay.cmd.headers import MAX_HEADERS, MAX_LINE, RequestHeaders


def read(raw: bytes) -> RequestHeaders:
    return RequestHeaders.read(io.BytesIO(raw))


def test_fields_are_found_without_regard_to_case_first_one_wins() -> None:
    headers = read(
        b"Host: q\r\nContent-Type: application/json\r\nX-Project-ID:  p1 \r\n"
        b"x-project-id: p2\r\n\r\nbody"
    )
    assert headers.status == ""
    assert headers.get("x-PROJECT-id") == "p1"
    assert headers.getheader("host") == "q"
    assert headers.typeheader == "application/json"
    assert headers.get("missing", "none") == "none"
    assert "HOST" in headers
    assert list(headers.headers) == [
        "Host: q\r\n",
        "Content-Type: application/json\r\n",
        "X-Project-ID: p1\r\n",
        "x-project-id: p2\r\n",
    ]


def test_it_reads_what_http_client_reads_and_stops_at_the_empty_line() -> None:
    raw = b"Host: q\r\nClient-ID: c\r\nContent-Length: 4\r\n\r\nbody"
    stream = io.BytesIO(raw)
    ours = RequestHeaders.read(stream)
    assert stream.read() == b"body"
    theirs = http.client.parse_headers(io.BytesIO(raw))
    assert ours.items() == list(theirs.items())


def test_deleting_a_field_removes_every_occurrence() -> None:
    headers = read(b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\ncontent-length: 4\r\n\r\n")
    del headers["content-length"]
    assert headers.get("Content-Length") is None
    assert headers.items() == [("Transfer-Encoding", "chunked")]


def test_a_folded_line_continues_the_field_before_it() -> None:
    assert read(b"X-Long: one\r\n  two\r\n\r\n").get("x-long") == "one two"


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"X: " + b"a" * MAX_LINE + b"\r\n\r\n", "Line too long"),
        (b"".join(b"X-%d: v\r\n" % i for i in range(MAX_HEADERS + 1)) + b"\r\n", "more than"),
        (b"no colon here\r\n\r\n", "malformed"),
        (b"Name : value\r\n\r\n", "malformed"),
        (b": value\r\n\r\n", "malformed"),
        (b" folded first\r\n\r\n", "continuation"),
        (b"X Y: v\r\n\r\n", "malformed"),
        (b"X\x01: v\r\n\r\n", "malformed"),
        # Control characters in a value: a lone CR, NUL, ESC, DEL; also in a folded line.
        (b"X-Project-ID: a\rb\r\n\r\n", "malformed"),
        (b"X: a\x00b\r\n\r\n", "malformed"),
        (b"X: \x1b[2J\r\n\r\n", "malformed"),
        (b"X: a\x7f\r\n\r\n", "malformed"),
        (b"X: a\r\n b\x00\r\n\r\n", "continuation"),
    ],
)
def test_malformed_headers_carry_a_status(raw: bytes, why: str) -> None:
    headers = read(raw)
    assert why in headers.status
    assert headers.items() == []


@pytest.mark.parametrize(
    ("framing", "why"),
    [
        (b"Content-Length: 25\r\nContent-Length: 5\r\n", "Content-Length"),
        (b"Content-Length: 5, 25\r\n", "Content-Length"),
        (b"Content-Length: 2_5\r\n", "Content-Length"),
        (b"Content-Length: +25\r\n", "Content-Length"),
        (b"Content-Length: -1\r\n", "Content-Length"),
        (b"Content-Length: 0x19\r\n", "Content-Length"),
        (b"Transfer-Encoding: gzip, chunked\r\n", "Transfer-Encoding"),
        (b"Transfer-Encoding: xchunked\r\n", "Transfer-Encoding"),
        (b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "Transfer-Encoding"),
        (b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "both"),
    ],
)
def test_a_body_framing_a_proxy_could_read_otherwise_carries_a_status(
    framing: bytes, why: str
) -> None:
    assert why in read(b"Host: q\r\n" + framing + b"\r\n").status


@pytest.mark.parametrize(
    "framing",
    [
        b"",
        b"Content-Length: 25\r\n",
        b"Content-Length: 25\r\ncontent-length: 25\r\n",
        b"Content-Length: 25, 25\r\n",
        b"Transfer-Encoding: Chunked\r\n",
    ],
)
def test_an_unambiguous_body_framing_is_read(framing: bytes) -> None:
    assert read(b"Host: q\r\n" + framing + b"\r\n").status == ""


def test_a_value_keeps_tabs_spaces_and_obs_text_inside_and_loses_them_around() -> None:
    headers = read(b"X-Note: \t caf\xe9\tau lait \t\r\nX-Empty:\r\n\r\n")
    assert headers.status == ""
    assert headers.items() == [("X-Note", "caf\xe9\tau lait"), ("X-Empty", "")]
