"""A small asyncio HTTP/1.1 client for the benchmarks.

No dependencies and light on CPU, because on a small machine the load generator shares the
cores with the servers it measures. A :class:`Connection` keeps its socket open while the
server allows it (gevent workers keep connections alive; gunicorn's sync workers close them
after every response) and reconnects transparently otherwise.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import urllib.parse
import uuid
from typing import Any

# What a request on a Connection raises when the server or the network lets it down.
TRANSPORT_ERRORS = (TimeoutError, OSError, asyncio.IncompleteReadError)


def epoch_ms(rfc3339: str) -> float:
    """Milliseconds since the epoch of a time the API wrote (``due`` of ``with_schedule``)."""
    return datetime.datetime.fromisoformat(rfc3339).timestamp() * 1000


class Response:
    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


def zaqar_headers(project: str = "bench") -> dict[str, str]:
    return {"Client-ID": str(uuid.uuid4()), "X-Project-ID": project}


class Connection:
    """One HTTP/1.1 connection to ``base_url``, one request at a time, reused when allowed."""

    def __init__(self, base_url: str, headers: dict[str, str] | None = None) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 80
        fixed = {"Host": f"{self.host}:{self.port}", **(headers or {})}
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.connects = 0

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._reader is None or self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
            self.connects += 1
        return self._reader, self._writer

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def request(
        self, method: str, path: str, document: Any = None, timeout: float = 60.0
    ) -> Response:
        """Send one request; a connection the server closed while idle is re-opened once."""
        body = b"" if document is None else json.dumps(document).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\n{self._fixed}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        for attempt in (0, 1):
            fresh = self._writer is None
            reader, writer = await self._open()
            try:
                writer.write(head + body)
                # A timeout scope, not wait_for: no extra task per request.
                async with asyncio.timeout(timeout):
                    return await self._read(reader)
            except (ConnectionError, asyncio.IncompleteReadError):
                self.close()
                if fresh or attempt:
                    raise
        raise AssertionError("unreachable")

    async def _read(self, reader: asyncio.StreamReader) -> Response:
        raw = await reader.readuntil(b"\r\n\r\n")
        lines = raw.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length, close = 0, False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection":
                close = value.strip().lower() == b"close"
        body = await reader.readexactly(length) if length else b""
        if close:
            self.close()
        return Response(status, body)
