"""WebSocket against HTTP on one server: posts and claims per second over each transport.

Starts a zaqar-delay-server (two workers, the embedded store) and, for each transport in
turn, ``--clients`` clients (threads) each holding one connection (an HTTP keep-alive
connection, or a WebSocket session), for ``--seconds``:

- **post**: each client posts one message per request to its own queue;
- **claim**: each client claims up to 10 messages per request from its queue, filled
  beforehand, and deletes what it claimed in one request.

Then **notifications**: a session subscribes itself to a queue and ``--notifications``
(1,000) messages are posted over HTTP, each due at its own instant (``deliver_at``, spread
over 2 s from 2 s on); each notification frame's lateness is its arrival minus its due time.

With ``--zaqar``, upstream Zaqar's WebSocket server (``zaqar-server`` with ``transport =
websocket``, one process, on a redis-server; from the comparison's cached virtualenv) takes
the same posts and claims, and then, in a second server with its notifier on, the same
notifications: posted over a session with ``delay`` 2 (upstream has no ``deliver_at``).

Printed (one JSON document, also written to ``--results``): requests and messages per
second, and the request latency p50/p99 in ms, per transport and operation; for the claims,
the messages left in the queues at the end (0 would mean the claims ran dry); for the
notifications, lateness p50/p99/max in ms, how many came early (before their due time) and
how many never came.

    python -m benchmarks.websocket --seconds 10 --clients 8
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
import websocket

from benchmarks.compare import ZAQAR_CONF, peer_venv
from benchmarks.loadgen import latency_summary
from benchmarks.swift import RESULTS
from testbed.processes import RedisServer, ServiceProcess, free_port, wait_until

CLIENT_ID = "3381af92-2b9e-11e3-b191-71861300734c"


class Http:
    """One keep-alive HTTP connection to the API at ``url``."""

    def __init__(self, url: str, project: str) -> None:
        self._url = url
        self._session = requests.Session()
        self._session.headers.update({"Client-ID": CLIENT_ID, "X-Project-ID": project})

    def post(self, queue: str, count: int) -> int:
        answer = self._session.post(
            f"{self._url}/v2/queues/{queue}/messages",
            json={"messages": [{"body": {"n": i}} for i in range(count)]},
            timeout=30,
        )
        assert answer.status_code == 201, answer.text
        return count

    def claim_and_delete(self, queue: str) -> int:
        answer = self._session.post(
            f"{self._url}/v2/queues/{queue}/claims?limit=10", json={"ttl": 60}, timeout=30
        )
        if answer.status_code == 204:
            return 0
        messages = answer.json()["messages"]
        claim_id = messages[0]["href"].rsplit("claim_id=", 1)[1]
        ids = ",".join(m["id"] for m in messages)
        self._session.delete(
            f"{self._url}/v2/queues/{queue}/messages?ids={ids}&claim_ids={claim_id}", timeout=30
        )
        return len(messages)

    def stats(self, queue: str) -> int:
        answer = self._session.get(f"{self._url}/v2/queues/{queue}/stats", timeout=30)
        return int(answer.json()["messages"]["total"])

    def close(self) -> None:
        self._session.close()


class Socket:
    """One WebSocket session at ``url``."""

    def __init__(self, url: str, project: str) -> None:
        self.ws = websocket.create_connection(url, timeout=30)
        self._headers = {"Client-ID": CLIENT_ID, "X-Project-ID": project}

    def call(self, action: str, **body: Any) -> dict[str, Any]:
        self.ws.send(json.dumps({"action": action, "headers": self._headers, "body": body}))
        answer: dict[str, Any] = json.loads(self.ws.recv())
        return answer

    def post(self, queue: str, count: int) -> int:
        answer = self.call(
            "message_post", queue_name=queue, messages=[{"body": {"n": i}} for i in range(count)]
        )
        assert answer["headers"]["status"] == 201, answer
        return count

    def claim_and_delete(self, queue: str) -> int:
        answer = self.call("claim_create", queue_name=queue, limit=10, ttl=60)
        if answer["headers"]["status"] == 204:
            return 0
        body = answer["body"]
        ids = [m["id"] for m in body["messages"]]
        self.call(
            "message_delete_many", queue_name=queue, message_ids=ids, claim_ids=[body["claim_id"]]
        )
        return len(ids)

    def stats(self, queue: str) -> int:
        answer = self.call("queue_get_stats", queue_name=queue)
        return int(answer["body"]["messages"]["total"])

    def close(self) -> None:
        self.ws.close()


def measure(
    clients: list[Any], seconds: float, operation: Callable[[Any, str], int]
) -> dict[str, Any]:
    """Every client runs ``operation`` on its own queue in a loop for ``seconds``."""
    latencies: list[list[float]] = [[] for _ in clients]
    messages = [0 for _ in clients]
    deadline = time.monotonic() + seconds

    def loop(index: int) -> None:
        queue = f"q{index}"
        while time.monotonic() < deadline:
            started = time.perf_counter()
            messages[index] += operation(clients[index], queue)
            latencies[index].append((time.perf_counter() - started) * 1000)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    requests_done = sum(len(found) for found in latencies)
    return {
        "requests_per_s": round(requests_done / seconds, 1),
        "messages_per_s": round(sum(messages) / seconds, 1),
        "latency_ms": latency_summary([ms for found in latencies for ms in found]),
    }


def notifications(service: ServiceProcess, count: int) -> dict[str, Any]:
    """Lateness of the notifications of ``count`` messages to a self-subscribed session, each
    posted over HTTP due at its own instant (``deliver_at``)."""
    project = f"bench-{uuid.uuid4().hex[:8]}"
    session = subscribed(f"ws://127.0.0.1:{service.port}/", project)
    http = requests.Session()
    http.headers.update({"Client-ID": CLIENT_ID, "X-Project-ID": project})
    start_ms = time.time() * 1000 + 2000
    dues = [int(start_ms + i * 2000 / count) for i in range(count)]
    with Arrivals(session, count) as arrivals:
        for first in range(0, count, 50):
            batch = [
                {"body": {"due_ms": due}, "deliver_at": due} for due in dues[first : first + 50]
            ]
            answer = http.post(
                f"{service.url}/v2/queues/notes/messages", json={"messages": batch}, timeout=30
            )
            assert answer.status_code == 201, answer.text
    http.close()
    return arrivals.report()


def zaqar_notifications(url: str, count: int) -> dict[str, Any]:
    """The same on upstream Zaqar's WebSocket server: posts of 50 over a second session, each
    message with ``delay`` 2 (its due time 2 s after the post is sent). Upstream's notifier
    sends at the post, whatever the delay."""
    project = f"bench-{uuid.uuid4().hex[:8]}"
    session = subscribed(url, project)
    poster = Socket(url, project)
    with Arrivals(session, count) as arrivals:
        for first in range(0, count, 50):
            due = int(time.time() * 1000) + 2000
            batch = [{"body": {"due_ms": due}, "delay": 2}] * min(50, count - first)
            answer = poster.call("message_post", queue_name="notes", messages=batch)
            assert answer["headers"]["status"] == 201, answer
    poster.close()
    return arrivals.report()


def subscribed(url: str, project: str) -> Socket:
    """A session at ``url`` subscribed to itself on the delayed queue ``notes``."""
    session = Socket(url, project)
    session.call("queue_create", queue_name="notes", metadata={"_default_message_delay": 1})
    answer = session.call("subscription_create", queue_name="notes", ttl=3600)
    assert answer["headers"]["status"] == 201, answer
    return session


class Arrivals:
    """Reads a session's notification frames in a thread from entry on, each one's lateness
    its arrival minus the ``due_ms`` of its body; on exit waits up to 10 s after the last."""

    def __init__(self, session: Socket, count: int) -> None:
        self._session = session
        self._count = count
        self.lateness: list[float] = []
        self._reader = threading.Thread(target=self._read, daemon=True)

    def __enter__(self) -> Arrivals:
        self._reader.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._reader.join()
        self._session.close()

    def _read(self) -> None:
        self._session.ws.settimeout(10)
        with contextlib.suppress(websocket.WebSocketTimeoutException):
            while len(self.lateness) < self._count:
                note = json.loads(self._session.ws.recv())
                self.lateness.append(time.time() * 1000 - note["body"]["due_ms"])

    def report(self) -> dict[str, Any]:
        return {
            "messages": self._count,
            "lateness_ms": latency_summary(self.lateness),
            "early": sum(late < 0 for late in self.lateness),
            "missing": self._count - len(self.lateness),
        }


def transport(make: Callable[[str], Any], args: argparse.Namespace) -> dict[str, Any]:
    """Posts, then claims and deletes, by ``--clients`` clients made by ``make(project)``."""
    project = f"bench-{uuid.uuid4().hex[:8]}"
    clients = [make(project) for _ in range(args.clients)]
    try:
        posted = measure(clients, args.seconds, lambda c, q: c.post(q, 1))
        for index, client in enumerate(clients):
            for _ in range(0, args.backlog, 100):
                client.post(f"c{index}", 100)
        claimed = measure(clients, args.seconds, lambda c, q: c.claim_and_delete("c" + q[1:]))
        claimed["backlog_left"] = sum(
            client.stats(f"c{index}") for index, client in enumerate(clients)
        )
    finally:
        for client in clients:
            client.close()
    return {"post": posted, "claim_and_delete": claimed}


class ZaqarWebSocket:
    """Upstream Zaqar's WebSocket server (``zaqar-server`` with ``transport = websocket``,
    one process) on a redis-server of its own, from the comparison's cached virtualenv."""

    def __init__(self, notifying: bool = False) -> None:
        """``notifying``: with upstream's notifier in the message pipeline and its endpoint
        for session subscriptions (apart, as it lists subscriptions at every post)."""
        self.redis = RedisServer().start()
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="zaqar-ws-"))
        conf = self.directory / "zaqar.conf"
        text = ZAQAR_WEBSOCKET_CONF.format(
            redis=self.redis.url, port=self.port, log=self.directory / "zaqar.log"
        )
        if notifying:
            text += ZAQAR_NOTIFYING.format(port=free_port())
        conf.write_text(text)
        server = peer_venv() / "bin" / "zaqar-server"
        self.process = subprocess.Popen(
            [str(server), "--config-file", str(conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(self._answers, 60, "Zaqar's WebSocket server")

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    def _answers(self) -> bool:
        with contextlib.suppress(OSError, websocket.WebSocketException):
            websocket.create_connection(self.url, timeout=1).close()
            return True
        return False

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(20)
        self.redis.stop()


# Upstream's comparison configuration, its transport the WebSocket server's.
ZAQAR_WEBSOCKET_CONF = ZAQAR_CONF.replace("transport = wsgi", "transport = websocket") + (
    "[drivers:transport:websocket]\nbind = 127.0.0.1\nport = {port}\n"
)


ZAQAR_NOTIFYING = (
    "notification_bind = 127.0.0.1\nnotification_port = {port}\n"
    "[storage]\nmessage_pipeline = zaqar.notification.notifier\n"
)


def run(args: argparse.Namespace) -> dict[str, Any]:
    service = ServiceProcess(workers=2).start().wait_for_workers()
    report: dict[str, Any] = {"clients": args.clients, "seconds": args.seconds}
    try:
        report["http"] = transport(lambda project: Http(service.url, project), args)
        ws_url = f"ws://127.0.0.1:{service.port}/"
        report["websocket"] = transport(lambda project: Socket(ws_url, project), args)
        report["notifications"] = notifications(service, args.notifications)
    finally:
        service.stop()
    if args.zaqar:
        zaqar = ZaqarWebSocket()
        try:
            report["zaqar_websocket"] = transport(lambda p: Socket(zaqar.url, p), args)
        finally:
            zaqar.stop()
        zaqar = ZaqarWebSocket(notifying=True)
        try:
            report["zaqar_notifications"] = zaqar_notifications(zaqar.url, args.notifications)
        finally:
            zaqar.stop()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--notifications", type=int, default=1000)
    parser.add_argument(
        "--zaqar",
        action="store_true",
        help="also upstream Zaqar's WebSocket server (its own process, on a redis-server)",
    )
    parser.add_argument(
        "--backlog",
        type=int,
        default=10_000,
        help="messages each client's queue holds before the claims (0 left: claims ran dry)",
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args()
    report = run(args)
    print(json.dumps(report))
    out = report_path(args.results)
    out.write_text(json.dumps(report, indent=1) + "\n")


def report_path(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"websocket-{time.strftime('%Y%m%d-%H%M%S')}.json"


if __name__ == "__main__":
    main()
