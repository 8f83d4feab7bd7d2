"""What clients that ask for large listings and read none of them cost a server's memory.

Starts ``zaqar-delay-server`` (embedded store, ``--workers`` 2, ``[server]
max_unsent_responses = --limit`` MiB unless it is left out), posts 20 messages of 60,000
four-byte characters (each written out as 720 KB of ``\\uXXXX`` escapes, so a listing of
them is 14 MB), then opens ``--connections`` connections that each ask for that listing and
read nothing (receive buffers of 4 KiB). Printed as one JSON line: the workers' resident
memory each second for ``--seconds``, the largest, and what they keep once the clients are
gone; another project's request while they stall (its status and time).

    python -m benchmarks.slow_readers [--connections 400] [--seconds 30] [--limit MIB]
        [--results DIR]

Writes ``DIR/slow-readers-<time>.json`` as well. Run it from an older checkout (its
``PYTHONPATH`` and working directory) to measure that revision's server.
"""

from __future__ import annotations

import argparse
import json
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

from benchmarks import recorded
from benchmarks.hostile_retry import resident_kib
from benchmarks.swift import RESULTS
from testbed.processes import ServiceProcess

CLIENT = "3381af92-2b9e-11e3-b191-71861300734c"
MESSAGES = 20
# Four bytes of UTF-8 each, two \\uXXXX escapes each in JSON: three times the bytes posted.
BODY = "\U0001f600" * 60_000
LISTING = f"/v2/queues/big/messages?limit={MESSAGES}&echo=true"


def headers(project: str) -> dict[str, str]:
    return {"Client-ID": CLIENT, "X-Project-ID": project}


def fill(url: str) -> None:
    document = json.dumps({"messages": [{"ttl": 3600, "body": BODY}]}, ensure_ascii=False)
    for _ in range(MESSAGES):
        posted = requests.post(
            f"{url}/v2/queues/big/messages",
            data=document.encode(),
            headers={**headers("hostile"), "Content-Type": "application/json"},
            timeout=30,
        )
        posted.raise_for_status()


def stall(port: int, connections: int) -> list[socket.socket]:
    request = "\r\n".join(
        [
            f"GET {LISTING} HTTP/1.1",
            "Host: q",
            *(f"{k}: {v}" for k, v in headers("hostile").items()),
        ]
    )
    opened = []
    for _ in range(connections):
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect(("127.0.0.1", port))
        client.sendall((request + "\r\n\r\n").encode())
        opened.append(client)
    return opened


def workers_mib(service: ServiceProcess) -> list[float]:
    return [round(resident_kib(pid) / 1024, 1) for pid in service.worker_pids()]


def filled_server(directory: str, option: str, value: int | None) -> ServiceProcess:
    """A server of two workers on the embedded store in ``directory``, with ``[server]
    option = value`` unless ``value`` is None, every worker serving and the listing
    posted."""
    args = []
    if value is not None:
        conf = Path(directory) / "server.conf"
        conf.write_text(f"[server]\n{option} = {value}\n")
        args = ["--config-file", str(conf)]
    service = ServiceProcess(args=args, workers=2, data_dir=directory + "/data").start()
    try:
        service.wait_for_workers()
        fill(service.url)
    except BaseException:
        service.stop()
        raise
    return service


def measure(connections: int, seconds: int, limit: int | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="zd-slow-readers-") as directory:
        service = filled_server(directory, "max_unsent_responses", limit)
        try:
            before = workers_mib(service)
            clients = stall(service.port, connections)
            samples = []
            for _ in range(seconds):
                time.sleep(1)
                samples.append(workers_mib(service))
            started = time.perf_counter()
            other = requests.get(
                f"{service.url}/v2/queues/mine/stats", headers=headers("other"), timeout=30
            )
            other_s = time.perf_counter() - started
            for client in clients:
                client.close()
            time.sleep(2)
            return {
                "workers_mib_before": before,
                "workers_mib_each_second": samples,
                "workers_mib_most": max(sum(sample) for sample in samples),
                "workers_mib_after": workers_mib(service),
                "other_project": {"status": other.status_code, "seconds": round(other_s, 3)},
            }
        finally:
            service.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=400)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--limit", type=int, help="[server] max_unsent_responses, MiB")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args()
    report = {
        "args": {"connections": args.connections, "seconds": args.seconds, "limit": args.limit},
        **measure(args.connections, args.seconds, args.limit),
    }
    print(json.dumps(report))
    recorded.write(args.results, "slow-readers", report)


if __name__ == "__main__":
    main()
