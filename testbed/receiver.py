"""A webhook receiver on a loopback port for push tests: records every request (arrival time,
headers, body) and answers with the statuses it is told to, in order, then 200."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Received:
    at_ns: int  # time.time_ns() on arrival
    headers: dict[str, str]
    body: bytes
    status: int = 200  # what the receiver answered

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    url: str
    statuses: list[int] = field(default_factory=list)  # answered first, in order
    delay_s: float = 0.0  # how long each answer takes
    # Answers wait until this is set (a receiver that hangs, until the test lets it go).
    answering: threading.Event = field(default_factory=threading.Event)
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: int = 0  # requests read and not answered yet
    most_in_flight: int = 0

    def wait_for(self, count: int, timeout_s: float = 30.0) -> list[Received]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.01)
        raise AssertionError(f"{len(self.received)} of {count} pushes arrived")


@contextmanager
def receiver(
    statuses: list[int] | None = None, delay_s: float = 0.0, hold: bool = False
) -> Iterator[Receiver]:
    """A receiver on a loopback port; ``hold``: it answers nothing until ``answering`` is set."""
    state = Receiver(url="", statuses=list(statuses or []), delay_s=delay_s)
    if not hold:
        state.answering.set()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            arrived = time.time_ns()
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            if len(body) < length:
                # The sender died mid-request (a kill -9 in a fault test): no push was
                # delivered, as any HTTP server would treat a request cut short.
                self.close_connection = True
                return
            with state.lock:
                status = state.statuses.pop(0) if state.statuses else 200
                state.received.append(Received(arrived, dict(self.headers), body, status))
                state.in_flight += 1
                state.most_in_flight = max(state.most_in_flight, state.in_flight)
            if state.delay_s:
                time.sleep(state.delay_s)
            state.answering.wait(30)
            with state.lock:
                state.in_flight -= 1
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.answering.set()
        server.shutdown()
        server.server_close()
