"""Reading request bodies within a size limit, before anything is parsed."""

from __future__ import annotations

from typing import Any

import falcon

from zaqar_delay import errors, jsondoc

# Bodies of routes without a documented limit (claims, purge) are small JSON objects.
DEFAULT_MAX_BODY = 65536


def read(req: falcon.Request, limit: int, too_large: str) -> bytes:
    """The raw body; InvalidRequest(too_large) when it is over ``limit`` bytes.

    The declared Content-Length is checked first so an oversized body is never read; a body
    sent without one (``Transfer-Encoding: chunked``) is read up to ``limit + 1`` bytes only.
    A body that ends before its length (or its last chunk) is an InvalidRequest too: the
    server's input raises OSError there, the client's fault, not the server's. One that does
    not arrive within the server's transfer timeout (cmd/transfer.py) is a RequestTimeout.
    """
    if req.content_length is not None and req.content_length > limit:
        raise errors.InvalidRequest(too_large)
    stream: Any = req.bounded_stream
    if req.content_length is None and req.env.get("wsgi.input_terminated"):
        # falcon bounds a body without a length to nothing; a server whose input ends where
        # the body does (gevent's, which decodes chunks) can be read to the end instead.
        stream = req.stream
    try:
        payload: bytes = stream.read(limit + 1)
    except TimeoutError as exc:
        raise errors.RequestTimeout(
            f"The request body was not received in time ({exc.strerror or exc}): send it "
            "whole right after the request's headers."
        ) from exc
    except OSError as exc:
        raise errors.InvalidRequest(f"The request body ended before it was whole: {exc}.") from exc
    if len(payload) > limit:
        raise errors.InvalidRequest(too_large)
    return payload


def read_json(
    req: falcon.Request, limit: int = DEFAULT_MAX_BODY, too_large: str | None = None
) -> Any:
    """The decoded JSON body, or None when there is no body at all.

    A body of white space only is not "no body": as in Zaqar it cannot be parsed (400).
    """
    payload = read(req, limit, too_large or f"Request body is too large. Max size: {limit}")
    if not payload:
        return None
    return jsondoc.loads(payload)
