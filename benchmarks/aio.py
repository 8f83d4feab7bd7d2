"""A minimal asyncio HTTP/1.1 client for the benchmarks: one request per connection, no
dependencies, light enough to hold thousands of concurrent requests on a small machine."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any


class Response:
    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


def zaqar_headers(project: str = "bench") -> dict[str, str]:
    return {"Client-ID": str(uuid.uuid4()), "X-Project-ID": project}


async def request(
    host: str,
    port: int,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    document: Any = None,
    timeout: float = 60.0,
) -> Response:
    body = b"" if document is None else json.dumps(document).encode()
    head = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    head += ["Content-Type: application/json", f"Content-Length: {len(body)}", "", ""]
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        writer.write("\r\n".join(head).encode() + body)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
    header_end = raw.index(b"\r\n\r\n")
    status = int(raw.split(b" ", 2)[1])
    return Response(status, raw[header_end + 4 :])


async def post_messages(
    port: int, queue: str, messages: list[dict[str, Any]], batch: int = 500
) -> list[str]:
    """Post ``messages`` in batches of ``batch`` (about 40 KiB each); returns their ids."""
    ids: list[str] = []
    for start in range(0, len(messages), batch):
        chunk = {"messages": messages[start : start + batch]}
        path = f"/v2/queues/{queue}/messages"
        response = await request("127.0.0.1", port, "POST", path, zaqar_headers(), chunk)
        assert response.status == 201, response.body
        ids += [href.rsplit("/", 1)[1] for href in response.json()["resources"]]
    return ids
