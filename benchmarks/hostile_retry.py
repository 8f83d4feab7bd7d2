"""A hostile retry policy beside a well-behaved tenant: what one worker pays for it.

Starts a redis-server and a one-worker zaqar-delay-server. One tenant's subscription points at
a closed loopback port with ``_retry_policy: {"maximum_delay": --maximum-delay}`` and is sent
``--hostile`` messages; it is written to the store directly, as a release without the
policy's bounds stored it (the API refuses it now). Another tenant's subscription points at a
webhook receiver and is sent one message every 100 ms for ``--seconds``. Printed (one JSON
line): the worker's resident memory before and after, the victim's push lateness (arrival
minus due) p50/p99/max, and the API's claim latency p50/max meanwhile.

    python -m benchmarks.hostile_retry --seconds 20
"""

from __future__ import annotations

import argparse
import http.server
import json
import secrets
import threading
import time
from typing import Any, ClassVar

import requests

from benchmarks.loadgen import latency_summary
from testbed.processes import RedisServer, ServiceProcess, free_port
from zaqar_delay.conf import STORAGE_URI_ENV, Settings, StorageSettings
from zaqar_delay.models import NewSubscription
from zaqar_delay.storage.uri import open_driver

HEADERS = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c", "Content-Type": "application/json"}


def resident_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def worker_pid(master: int) -> int:
    with open(f"/proc/{master}/task/{master}/children") as f:
        return int(f.read().split()[0])


class Receiver(http.server.BaseHTTPRequestHandler):
    """Records when each push arrived and the due time its body carries."""

    protocol_version = "HTTP/1.1"
    lateness_ms: ClassVar[list[float]] = []

    def do_POST(self) -> None:
        arrived_ms = time.time() * 1000
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Receiver.lateness_ms.append(arrived_ms - body["body"]["due_ms"])
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def run(args: argparse.Namespace) -> dict[str, Any]:
    redis = RedisServer().start()
    service = ServiceProcess(env={STORAGE_URI_ENV: redis.url}, workers=1).start()
    service.wait_for_workers()
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    driver = open_driver(redis.url, Settings(storage=StorageSettings(uri=redis.url)))
    try:
        assert service.process is not None
        worker = worker_pid(service.process.pid)
        hook = f"http://127.0.0.1:{receiver.server_address[1]}/hook"
        victim = requests.post(
            f"{service.url}/v2/queues/victim/subscriptions",
            json={"subscriber": hook},
            headers={**HEADERS, "X-Project-ID": "victim"},
            timeout=10,
        )
        victim.raise_for_status()
        policy = {"_retry_policy": {"maximum_delay": args.maximum_delay}}
        driver.create_subscription(
            "hostile",
            "q",
            NewSubscription(
                f"http://127.0.0.1:{free_port()}/closed", 3600, policy, secrets.token_urlsafe(32)
            ),
            int(time.time() * 1000),
        )
        time.sleep(1)
        before_kib = resident_kib(worker)
        hostile = {"messages": [{"body": n, "ttl": 3600} for n in range(args.hostile)]}
        requests.post(
            f"{service.url}/v2/queues/q/messages",
            json=hostile,
            headers={**HEADERS, "X-Project-ID": "hostile"},
            timeout=60,
        ).raise_for_status()
        claims_ms: list[float] = []
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            due_ms = time.time() * 1000
            message = {"messages": [{"body": {"due_ms": due_ms}, "ttl": 600}]}
            requests.post(
                f"{service.url}/v2/queues/victim/messages",
                json=message,
                headers={**HEADERS, "X-Project-ID": "victim"},
                timeout=60,
            )
            started = time.perf_counter()
            requests.post(
                f"{service.url}/v2/queues/other/claims",
                json={"ttl": 60, "grace": 60},
                headers={**HEADERS, "X-Project-ID": "victim"},
                timeout=60,
            )
            claims_ms.append((time.perf_counter() - started) * 1000)
            time.sleep(0.1)
        time.sleep(2)
        return {
            "maximum_delay": args.maximum_delay,
            "hostile_messages": args.hostile,
            "worker_rss_mib_before": round(before_kib / 1024, 1),
            "worker_rss_mib_after": round(resident_kib(worker) / 1024, 1),
            "victim_pushes": len(Receiver.lateness_ms),
            "victim_push_lateness_ms": latency_summary(Receiver.lateness_ms),
            "claim_ms": latency_summary(claims_ms),
        }
    finally:
        driver.close()
        receiver.shutdown()
        service.stop()
        redis.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--hostile", type=int, default=20, help="messages to the closed port")
    parser.add_argument("--maximum-delay", type=int, default=50_000_000)
    print(json.dumps(run(parser.parse_args())))


if __name__ == "__main__":
    main()
