"""Single-message posts/s and claims/s against a real zaqar-delay-server (gunicorn, 2 workers).

Runs the server twice: on the embedded default store and on a redis-server on a loopback port.
Load comes from ``--clients`` processes, each sending one request at a time. Prints one JSON
document per store and a human line. Numbers depend on the machine; nothing here is a test.

    python benchmarks/throughput.py [--seconds 10] [--clients 4] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
import uuid

import requests

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.processes import RedisServer, ServiceProcess
from zaqar_delay.conf import STORAGE_URI_ENV

PROJECT = "bench"


def _headers() -> dict[str, str]:
    return {
        "Client-ID": str(uuid.uuid4()),
        "X-Project-ID": PROJECT,
        "Content-Type": "application/json",
    }


def _post_loop(url: str, queue: str, seconds: float, results: multiprocessing.Queue) -> None:
    session, headers = requests.Session(), _headers()
    body = json.dumps({"messages": [{"body": {"n": 1}, "ttl": 3600}]})
    done, errors, deadline = 0, 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        response = session.post(f"{url}/v2/queues/{queue}/messages", data=body, headers=headers)
        if response.status_code == 201:
            done += 1
        else:
            errors += 1
    results.put((done, errors))


def _claim_loop(url: str, queue: str, seconds: float, results: multiprocessing.Queue) -> None:
    session, headers = requests.Session(), _headers()
    done, errors, deadline = 0, 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        response = session.post(
            f"{url}/v2/queues/{queue}/claims?limit=1", data="{}", headers=headers
        )
        if response.status_code == 201:
            done += 1
        elif response.status_code == 204:
            break
        else:
            errors += 1
    results.put((done, errors))


def _run(target: object, url: str, queue: str, clients: int, seconds: float) -> dict[str, float]:
    results: multiprocessing.Queue = multiprocessing.Queue()
    processes = [
        multiprocessing.Process(target=target, args=(url, queue, seconds, results))
        for _ in range(clients)
    ]
    started = time.monotonic()
    for p in processes:
        p.start()
    totals = [results.get() for _ in processes]
    for p in processes:
        p.join()
    elapsed = time.monotonic() - started
    done = sum(t[0] for t in totals)
    return {
        "requests": done,
        "errors": sum(t[1] for t in totals),
        "seconds": round(elapsed, 2),
        "per_second": round(done / elapsed, 1),
    }


def _preload(url: str, queue: str, count: int) -> None:
    session, headers = requests.Session(), _headers()
    batch = json.dumps({"messages": [{"body": {"n": i}, "ttl": 3600} for i in range(20)]})
    for _ in range(count // 20):
        session.post(
            f"{url}/v2/queues/{queue}/messages", data=batch, headers=headers
        ).raise_for_status()


def measure(service: ServiceProcess, store: str, args: argparse.Namespace) -> dict[str, object]:
    posts = _run(_post_loop, service.url, "posts", args.clients, args.seconds)
    _preload(service.url, "claims", args.claim_backlog)
    claims = _run(_claim_loop, service.url, "claims", args.clients, args.seconds)
    return {
        "store": store,
        "workers": args.workers,
        "clients": args.clients,
        "posts": posts,
        "claims": claims,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--claim-backlog", type=int, default=40000)
    args = parser.parse_args()

    redis_server = RedisServer().start()
    try:
        for store, env in (("embedded", {}), ("redis-server", {STORAGE_URI_ENV: redis_server.url})):
            service = ServiceProcess(env=env, workers=args.workers).start()
            try:
                report = measure(service, store, args)
            finally:
                service.stop()
            print(json.dumps(report))
            print(
                f"{store}: {report['posts']['per_second']} posts/s, "
                f"{report['claims']['per_second']} claims/s "
                f"({args.workers} gunicorn workers, {args.clients} client processes)",
                flush=True,
            )
    finally:
        redis_server.stop()


if __name__ == "__main__":
    main()
