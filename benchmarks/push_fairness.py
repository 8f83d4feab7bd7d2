"""Push fairness: one tenant's backlog of owed pushes beside another tenant pushed every 100 ms.

Starts a redis-server and a one-worker zaqar-delay-server (``--server-tree``: the checkout
whose ``zaqar_delay`` it runs, to measure an older revision) and a webhook receiver on
loopback. The hostile tenant subscribes ``--subscriptions`` (20, the per-queue quota)
receivers to one queue, each answering after ``--answer-ms``, and posts ``--messages``
(1,000) messages at once: ``subscriptions x messages`` pushes owed (20,000). Meanwhile the
other tenant posts one message every 100 ms for ``--seconds`` to a queue with one
subscription. Printed (one JSON line): that tenant's push lateness (arrival minus the time
its message was posted, due at once) p50/p99/max over the pushes that arrived while the
backlog was still owed, how much of the backlog was pushed by the end, and how long that took.

    python -m benchmarks.push_fairness --seconds 20
"""

from __future__ import annotations

import argparse
import http.server
import json
import threading
import time
from typing import Any, ClassVar

import requests

from benchmarks.loadgen import latency_summary
from testbed.processes import RedisServer, ServiceProcess
from zaqar_delay.conf import STORAGE_URI_ENV

HEADERS = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c", "Content-Type": "application/json"}


class Receiver(http.server.BaseHTTPRequestHandler):
    """``/hostile/<n>`` answers after ``answer_s``; ``/victim`` records each push's lateness
    (arrival minus the due time its body carries) and how much backlog was left then."""

    protocol_version = "HTTP/1.1"
    answer_s: ClassVar[float] = 0.0
    hostile = 0
    hostile_last_ms = 0.0
    victim: ClassVar[list[tuple[float, int]]] = []  # (lateness ms, hostile pushes by then)
    lock = threading.Lock()

    def do_POST(self) -> None:
        arrived_ms = time.time() * 1000
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path.startswith("/hostile"):
            time.sleep(Receiver.answer_s)
            with Receiver.lock:
                Receiver.hostile += 1
                Receiver.hostile_last_ms = time.time() * 1000
        else:
            with Receiver.lock:
                Receiver.victim.append((arrived_ms - body["body"]["due_ms"], Receiver.hostile))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def post(service: ServiceProcess, project: str, path: str, document: Any) -> None:
    requests.post(
        f"{service.url}{path}",
        json=document,
        headers={**HEADERS, "X-Project-ID": project},
        timeout=120,
    ).raise_for_status()


def run(args: argparse.Namespace) -> dict[str, Any]:
    Receiver.answer_s = args.answer_ms / 1000
    redis = RedisServer().start()
    service = ServiceProcess(
        env={STORAGE_URI_ENV: redis.url}, workers=1, cwd=args.server_tree
    ).start()
    service.wait_for_workers()
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    receiver.daemon_threads = True
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{receiver.server_address[1]}"
    try:
        post(service, "victim", "/v2/queues/victim/subscriptions", {"subscriber": f"{base}/victim"})
        for n in range(args.subscriptions):
            subscriber = {"subscriber": f"{base}/hostile/{n}"}
            post(service, "hostile", "/v2/queues/flood/subscriptions", subscriber)
        owed = args.subscriptions * args.messages
        backlog = {"messages": [{"body": {"n": n, "due_ms": 0}} for n in range(args.messages)]}
        backlog_posted_ms = time.time() * 1000
        post(service, "hostile", "/v2/queues/flood/messages", backlog)
        end = time.monotonic() + args.seconds
        posted = 0
        while time.monotonic() < end:
            message = {"messages": [{"body": {"due_ms": time.time() * 1000}, "ttl": 600}]}
            post(service, "victim", "/v2/queues/victim/messages", message)
            posted += 1
            time.sleep(0.1)
        time.sleep(2)
        with Receiver.lock:
            victim, hostile = list(Receiver.victim), Receiver.hostile
        during = [lateness for lateness, pushed in victim if pushed < owed]
        return {
            "hostile_pushes_owed": owed,
            "hostile_pushed_by_end": hostile,
            "hostile_answer_ms": args.answer_ms,
            # From the backlog's post to its last push (or to the end, if not all were made).
            "hostile_pushing_s": round((Receiver.hostile_last_ms - backlog_posted_ms) / 1000, 2),
            "victim_posted": posted,
            "victim_pushed": len(victim),
            "victim_pushed_during_backlog": len(during),
            "victim_lateness_during_backlog_ms": latency_summary(during),
            "victim_lateness_ms": latency_summary([lateness for lateness, _ in victim]),
        }
    finally:
        receiver.shutdown()
        service.stop()
        redis.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--subscriptions", type=int, default=20)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--answer-ms", type=float, default=10)
    parser.add_argument("--server-tree", default=None, help="checkout whose server to run")
    print(json.dumps(run(parser.parse_args())))


if __name__ == "__main__":
    main()
