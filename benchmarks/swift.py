"""zaqar-delay and upstream Zaqar 23.0.1, each on OpenStack Swift, on one Swift all-in-one.

Starts a Swift all-in-one (``testbed/swift_aio.py``) whose proxy sends a line per request to a
UDP port this script counts, a Keystone v3 stand-in for upstream Zaqar (its Swift driver
authenticates through Keystone only; the token it hands out is a tempauth token), upstream
Zaqar in the cached virtualenv of ``compare.py`` (with python-swiftclient, and a redis-server as
its management store), and zaqar-delay on the same account (tempauth directly). Then, for each
server in turn (``--workers`` gunicorn workers each):

- ``produce``: ``--messages`` single-message posts from ``--threads`` threads;
- ``consume``: claims of 10 and a DELETE of each message with its claim id, until none is left
  (messages per second, and distinct messages per second: one consumed twice counts once);
- ``claim latency``: ``--backlog`` messages posted in batches of 10, then ``--claims`` claims of
  one message, one after another: p50, p95 and max;
- ``early``: ``--delayed`` messages with delays of 1-5 s on a queue whose
  ``_default_message_delay`` is 1, claimed for ``--claim-for`` seconds by ``--threads``
  threads: a message whose claim answer arrived before its POST was sent plus its delay was
  certainly claimed early; a message claimed twice was in two claims (each claim deletes what
  it took at once).

Also printed: Swift requests per message (proxy log lines during produce, consume; the JSON
has them by kind, ``produce_requests`` and ``consume_requests``) and Swift objects per stored
message (after produce, counted container by container).

    python -m benchmarks.swift [--messages 300] [--backlog 10000] [--claims 30]
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import re
import socket
import statistics
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests

from benchmarks.compare import Gunicorn, peer_venv
from testbed.keystone_standin import KeystoneStandIn
from testbed.processes import RedisServer, ServiceProcess, free_port
from testbed.swift_aio import SwiftAllInOne
from zaqar_delay.conf import STORAGE_URI_ENV

RESULTS = Path(__file__).resolve().parent / "results"
PEER_CONF = """\
[DEFAULT]
auth_strategy =
unreliable = true
log_file = {log}
[drivers]
transport = wsgi
message_store = swift
management_store = redis
[drivers:message_store:swift]
uri = swift://demo:s3cret@/demo-project
auth_url = {keystone}
[drivers:management_store:redis]
uri = {redis}
"""


REQUEST_LINE = re.compile(r" (GET|PUT|POST|DELETE|HEAD|COPY) (\S+) HTTP/1\.\d (\d{3}) ")


def request_kind(line: str) -> str:
    """``METHOD container object-shape status`` of a proxy access-log line: numbers and hex
    runs in names become ``N`` and ``H``, a container listing is ``?list``."""
    found = REQUEST_LINE.search(line)
    if found is None:
        return "other"
    method, path, status = found.groups()
    # The proxy logs the path quoted once more than it was sent.
    path, _, query = urllib.parse.unquote(urllib.parse.unquote(path)).partition("?")
    parts = path.split("/", 4)[3:]  # after /v1/<account>/
    shape = re.sub(r"[\x00-\x1f]", "|", "/".join(parts))  # upstream separates with \x1f
    shape = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "U", shape)
    shape = re.sub(r"bench-[0-9a-f]{8}", "P", shape)
    shape = re.sub(r"[0-9a-f]{16,}", "H", shape)
    shape = re.sub(r"\d+", "N", shape)
    listing = " ?list" if len(parts) == 1 and "format=json" in query else ""
    return f"{method} {shape}{listing} {status}"


class RequestCounter:
    """Counts the proxy's access-log lines arriving on a UDP port, by kind of request."""

    def __init__(self) -> None:
        self.port = free_port()
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind(("127.0.0.1", self.port))
        self._socket.settimeout(0.2)
        self.count = 0
        self.kinds: collections.Counter[str] = collections.Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                line = self._socket.recv(65536)
            except TimeoutError:
                continue
            self.kinds[request_kind(line.decode(errors="replace"))] += 1
            self.count += 1

    def per_message(self, before: collections.Counter[str], messages: int) -> dict[str, float]:
        """Requests of each kind since ``before`` (a copy of ``kinds``), per message."""
        grown = self.kinds - before
        return {kind: round(n / messages, 2) for kind, n in grown.most_common()}

    def settled(self) -> int:
        """The count once lines stop arriving (they trail their requests a little)."""
        last = -1
        while last != self.count:
            last = self.count
            time.sleep(0.5)
        return self.count

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self._socket.close()


class Client:
    """Zaqar v2 calls on one server, one project."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.project = f"bench-{uuid.uuid4().hex[:8]}"
        self._local = threading.local()

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.headers.update({"Client-ID": str(uuid.uuid4()), "X-Project-ID": self.project})
            self._local.session = session
        return session

    def call(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return self._session().request(method, self.url + path, timeout=120, **kwargs)

    def post(self, queue: str, messages: list[dict[str, Any]]) -> list[str]:
        answer = self.call("POST", f"/v2/queues/{queue}/messages", json={"messages": messages})
        assert answer.status_code == 201, answer.text
        return [href.rsplit("/", 1)[1] for href in answer.json()["resources"]]

    def claim(self, queue: str, limit: int, ttl: int = 300) -> list[dict[str, Any]]:
        answer = self.call(
            "POST", f"/v2/queues/{queue}/claims?limit={limit}", json={"ttl": ttl, "grace": 60}
        )
        if answer.status_code == 204:
            return []
        assert answer.status_code == 201, answer.text
        return list(answer.json()["messages"])

    def delete(self, queue: str, message: dict[str, Any]) -> bool:
        """False when the server refuses: another live claim holds the message."""
        href = message["href"]
        answer = self.call("DELETE", href[href.index("/v2/") :])
        assert answer.status_code in (204, 403), answer.text
        return answer.status_code == 204


def in_threads(count: int, work: Callable[[int], None]) -> float:
    """Run ``work(i)`` in ``count`` threads; the seconds it took."""
    started = time.monotonic()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.monotonic() - started


def swift_objects(swift: SwiftAllInOne) -> dict[str, int]:
    """Objects per container of the account."""
    found = swift.token()
    assert found is not None
    url, token = found
    headers = {"X-Auth-Token": token}
    containers = requests.get(url, headers=headers, params={"format": "json"}, timeout=30).json()
    return {
        c["name"]: int(
            requests.head(f"{url}/{c['name']}", headers=headers, timeout=30).headers[
                "X-Container-Object-Count"
            ]
        )
        for c in containers
    }


def measure(
    name: str, client: Client, swift: SwiftAllInOne, counter: RequestCounter, args: Any
) -> dict[str, Any]:
    report: dict[str, Any] = {"server": name}
    lock = threading.Lock()

    # produce
    objects_before = sum(swift_objects(swift).values())
    client.call("PUT", "/v2/queues/work")
    requests_before = counter.settled()
    kinds_before = counter.kinds.copy()
    per_thread = args.messages // args.threads

    def produce(i: int) -> None:
        for n in range(per_thread):
            client.post("work", [{"body": {"i": i, "n": n}, "ttl": 3600}])

    seconds = in_threads(args.threads, produce)
    produced = per_thread * args.threads
    report["produce_per_s"] = produced / seconds
    report["produce_requests_per_message"] = (counter.settled() - requests_before) / produced
    report["produce_requests"] = counter.per_message(kinds_before, produced)
    report["objects_per_message"] = (sum(swift_objects(swift).values()) - objects_before) / produced

    # consume
    requests_before = counter.settled()
    kinds_before = counter.kinds.copy()
    consumed: list[str] = []
    refused: list[str] = []

    def consume(_: int) -> None:
        while True:
            taken = client.claim("work", 10)
            if not taken:
                return
            for message in taken:
                if not client.delete("work", message):
                    with lock:
                        refused.append(message["id"])
            with lock:
                consumed.extend(m["id"] for m in taken)

    seconds = in_threads(args.threads, consume)
    report["consume_per_s"] = len(consumed) / seconds
    # Messages consumed twice count once: the second delivery is work wasted, not done.
    report["consume_distinct_per_s"] = len(set(consumed)) / seconds
    report["consumed"] = len(consumed)
    report["consumed_twice"] = len(consumed) - len(set(consumed))
    report["delete_refused"] = len(refused)
    report["left_after_consume"] = produced - len(set(consumed))
    report["consume_requests_per_message"] = (counter.settled() - requests_before) / max(
        len(consumed), 1
    )
    report["consume_requests"] = counter.per_message(kinds_before, max(len(consumed), 1))

    # claim latency with a backlog
    client.call("PUT", "/v2/queues/backlog")
    batches = args.backlog // 10

    def fill(i: int) -> None:
        for batch in range(i, batches, args.threads):
            client.post("backlog", [{"body": batch * 10 + k, "ttl": 3600} for k in range(10)])

    report["backlog_fill_s"] = in_threads(args.threads, fill)
    latencies = []
    for _ in range(args.claims):
        started = time.monotonic()
        assert client.claim("backlog", 1), "the backlog ran dry"
        latencies.append((time.monotonic() - started) * 1000)
    latencies.sort()
    report["claim_ms"] = {
        "p50": statistics.median(latencies),
        "p95": latencies[int(0.95 * (len(latencies) - 1))],
        "max": latencies[-1],
    }

    # early claims
    client.call("PUT", "/v2/queues/later", json={"_default_message_delay": 1})
    due: dict[str, float] = {}
    for n in range(args.delayed):
        delay = random.randint(1, 5)
        sent = time.time()
        [mid] = client.post("later", [{"body": n, "ttl": 3600, "delay": delay}])
        due[mid] = sent + delay
    claimed_at: dict[str, list[float]] = {}
    deadline = time.monotonic() + args.claim_for

    def consume_later(_: int) -> None:
        while time.monotonic() < deadline:
            taken = client.claim("later", 10)
            received = time.time()
            for message in taken:
                with lock:
                    claimed_at.setdefault(message["id"], []).append(received)
                if not client.delete("later", message):
                    with lock:
                        refused.append(message["id"])
            if not taken:
                time.sleep(0.05)

    in_threads(args.threads, consume_later)
    report["early"] = sum(1 for mid, at in claimed_at.items() if min(at) < due[mid])
    report["claimed_twice"] = sum(1 for at in claimed_at.values() if len(at) > 1)
    report["delayed_claimed"] = len(claimed_at)
    report["delayed_posted"] = len(due)
    return report


@contextmanager
def upstream(swift: SwiftAllInOne, workers: int) -> Iterator[str]:
    found = swift.token()
    assert found is not None
    keystone = KeystoneStandIn(
        {"demo": "s3cret"},
        token=lambda: swift.token()[1],  # type: ignore[index]
        endpoints=[{"interface": "public", "region": "RegionOne", "url": found[0]}],
    ).start()
    redis = RedisServer().start()
    venv = peer_venv()
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as conf:
        conf.write(PEER_CONF.format(log=conf.name + ".log", keystone=keystone.url, redis=redis.url))
    zaqar = Gunicorn(
        str(venv / "bin" / "python"),
        "zaqar_app:application",
        workers,
        ["-k", "sync"],
        {"ZAQAR_PEER_CONFIG": conf.name},
    )
    try:
        yield zaqar.url
    finally:
        zaqar.stop()
        redis.stop()
        keystone.stop()


@contextmanager
def ours(swift: SwiftAllInOne, workers: int) -> Iterator[str]:
    service = ServiceProcess(env={STORAGE_URI_ENV: swift.store_uri}, workers=workers).start()
    try:
        yield service.url
    finally:
        service.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--claims", type=int, default=30)
    parser.add_argument("--delayed", type=int, default=100)
    parser.add_argument("--claim-for", type=float, default=8.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", choices=["zaqar-delay", "Zaqar"], default=None)
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args()
    counter = RequestCounter()
    swift = SwiftAllInOne(access_log_port=counter.port).start()
    reports = []
    try:
        for name, server in (("zaqar-delay", ours), ("Zaqar", upstream)):
            if args.only and args.only != name:
                continue
            with server(swift, args.workers) as url:
                report = measure(name, Client(url), swift, counter, args)
            print(json.dumps(report), flush=True)
            reports.append(report)
    finally:
        swift.stop()
        counter.close()
    for report in reports:
        print(
            f"{report['server']:>12}: produce {report['produce_per_s']:.0f}/s "
            f"({report['produce_requests_per_message']:.1f} Swift requests, "
            f"{report['objects_per_message']:.1f} objects per message); consume "
            f"{report['consume_per_s']:.0f}/s, {report['consume_distinct_per_s']:.0f}/s distinct "
            f"({report['consume_requests_per_message']:.1f} "
            f"requests per message, {report['consumed_twice']} consumed twice, "
            f"{report['left_after_consume']} never consumed); claim with "
            f"{args.backlog:,} outstanding p50 {report['claim_ms']['p50']:.0f} ms, p95 "
            f"{report['claim_ms']['p95']:.0f} ms; early claims {report['early']} of "
            f"{report['delayed_claimed']}, in two claims {report['claimed_twice']}"
        )
    args.results.mkdir(exist_ok=True)
    out = args.results / f"swift-{time.strftime('%Y%m%d-%H%M%S')}.json"
    settings = {key: str(value) for key, value in vars(args).items()}
    out.write_text(json.dumps({"args": settings, "reports": reports}, indent=1))
    print(f"raw results: {out}")


if __name__ == "__main__":
    main()
