"""Push delivery: a local webhook receiver, delayed messages, and when each push arrives.

Starts a redis-server, a zaqar-delay-server (``--workers`` workers, each sending pushes) and
an asyncio webhook receiver on loopback ports; with ``--zaqar`` also upstream Zaqar (its own
redis-server, its notifier on, as ``compare.py`` installs it). For each server, one queue
with one webhook subscription, then two runs:

``rate``
    ``--rate`` messages per second for ``--seconds`` (``--batch`` per POST, ``delay`` 1 to
    ``--max-delay`` whole seconds); the receiver records each push's arrival. Lateness is
    arrival minus (POST sent + delay), an upper bound of arrival minus due; a push arriving
    before POST sent + delay is certainly early. Also: deliveries per second (median of the
    seconds between ``--max-delay`` and the end of posting),
    messages never pushed, and pushes received twice.
``drain``
    ``--drain`` messages posted 20 per POST, all due at one instant (``deliver_at``, or a
    ``delay`` on Zaqar, which has no ``deliver_at``) once posting is over: how fast the
    server pushes a backlog that falls due at once (first arrival to last).

    python -m benchmarks.push --rate 1000 --seconds 30 [--zaqar]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import json
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from benchmarks.aio import TRANSPORT_ERRORS, Connection, zaqar_headers
from benchmarks.compare import ZAQAR_CONF, Gunicorn, peer_venv
from benchmarks.loadgen import latency_summary
from benchmarks.procstat import cpu_seconds
from testbed.processes import RedisServer, ServiceProcess
from zaqar_delay.conf import STORAGE_URI_ENV

# Upstream Zaqar with its notifier (subscriptions are pushed by the message pipeline).
ZAQAR_PUSH_CONF = ZAQAR_CONF + "[storage]\nmessage_pipeline = zaqar.notification.notifier\n"


class Hook:
    """An HTTP/1.1 webhook receiver (keep-alive) that records when each request arrived."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[int, bytes]] = []  # (time.time_ns(), body)
        self.server: asyncio.Server | None = None
        self.port = 0
        self.connections: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def stop(self) -> None:
        """Stop listening and hang up on every sender (their requests are over)."""
        assert self.server is not None
        self.server.close()
        for writer in list(self.connections):
            writer.close()
        await asyncio.sleep(0.1)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                arrived = time.time_ns()
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length) if length else b""
                self.arrivals.append((arrived, body))
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.connections.discard(writer)
            writer.close()

    def bodies(self) -> list[tuple[int, dict[str, Any]]]:
        """Each push's arrival and the message body it carried."""
        return [(at, json.loads(raw)["body"]) for at, raw in self.arrivals]


async def subscribe(url: str, queue: str, hook: Hook) -> None:
    connection = Connection(url, zaqar_headers())
    try:
        # A delayed queue: as in Zaqar, a message's own delay counts only on one.
        created = await connection.request(
            "PUT", f"/v2/queues/{queue}", {"_default_message_delay": 1}
        )
        assert created.status in (201, 204), created.body
        subscribed = await connection.request(
            "POST", f"/v2/queues/{queue}/subscriptions", {"subscriber": hook.url, "ttl": 3600}
        )
        assert subscribed.status == 201, subscribed.body
    finally:
        connection.close()


async def produce(
    url: str,
    queue: str,
    rate: float,
    end: float,
    args: argparse.Namespace,
    sent: dict[int, tuple[int, int]],
) -> int:
    """Post ``rate`` messages/s, ``args.batch`` per POST, until ``end``; records (sent ns,
    delay s) of each."""
    connection = Connection(url, zaqar_headers())
    rng = random.Random()
    errors = 0
    next_at = time.monotonic()
    try:
        while time.monotonic() < end:
            messages = []
            sent_ns = time.time_ns()
            for _ in range(args.batch):
                n, delay = len(sent), rng.randint(1, args.max_delay)
                sent[n] = (sent_ns, delay)
                messages.append({"body": {"n": n}, "ttl": 600, "delay": delay})
            try:
                answer = await connection.request(
                    "POST", f"/v2/queues/{queue}/messages", {"messages": messages}
                )
                errors += answer.status != 201
            except TRANSPORT_ERRORS:
                errors += 1
                connection.close()
            next_at += args.batch / rate
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    finally:
        connection.close()
    return errors


@dataclasses.dataclass
class Server:
    """A server under test: its URL, and the pids of its workers' tree and its redis-server."""

    url: str
    server_pid: int
    redis_pid: int


async def rate_run(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    url = server.url
    hook = Hook()
    await hook.start()
    queue = f"push-rate-{random.randrange(10**6)}"
    await subscribe(url, queue, hook)
    sent: dict[int, tuple[int, int]] = {}
    producers = max(1, int(args.rate / args.batch // 50))
    started, cpu_started = time.monotonic(), time.process_time()
    server_cpu = cpu_seconds([server.server_pid]), cpu_seconds([server.redis_pid])
    end = started + args.seconds
    errors = await asyncio.gather(
        *(produce(url, queue, args.rate / producers, end, args, sent) for _ in range(producers))
    )
    deadline = time.monotonic() + args.max_delay + args.grace
    while len(hook.arrivals) < len(sent) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    elapsed = time.monotonic() - started
    client_cpu = 100 * (time.process_time() - cpu_started) / elapsed
    server_cpu_percent = 100 * (cpu_seconds([server.server_pid]) - server_cpu[0]) / elapsed
    redis_cpu_percent = 100 * (cpu_seconds([server.redis_pid]) - server_cpu[1]) / elapsed
    await hook.stop()
    lateness, early, seen, duplicates = [], 0, set(), 0
    arrivals = hook.bodies()
    for at, body in arrivals:
        n = body["n"]
        duplicates += n in seen
        seen.add(n)
        sent_ns, delay_s = sent[n]
        late_ms = (at - sent_ns) / 1e6 - delay_s * 1000
        early += late_ms < 0
        lateness.append(late_ms)
    # Deliveries per second once every delay is in play, until posting ends.
    started_ns = time.time_ns() - int((time.monotonic() - started) * 1e9)
    per_second = collections.Counter(int((at - started_ns) / 1e9) for at, _ in arrivals)
    steady = [per_second[s] for s in range(args.max_delay, int(args.seconds))]
    return {
        "rate": args.rate,
        "per_post": args.batch,
        "seconds": args.seconds,
        "posted": len(sent),
        "post_errors": sum(errors),
        "pushed": len(arrivals),
        "deliveries_per_s": statistics.median(steady) if steady else None,
        "never_pushed": len(sent) - len(seen),
        "duplicates": duplicates,
        "early": early,
        "lateness_ms": latency_summary(lateness),
        "client_cpu_percent": round(client_cpu, 1),
        "server_cpu_percent": round(server_cpu_percent, 1),
        "redis_cpu_percent": round(redis_cpu_percent, 1),
    }


async def drain_run(
    server: Server, args: argparse.Namespace, has_deliver_at: bool
) -> dict[str, Any]:
    url = server.url
    hook = Hook()
    await hook.start()
    queue = f"push-drain-{random.randrange(10**6)}"
    await subscribe(url, queue, hook)
    connection = Connection(url, zaqar_headers())
    # Due a few seconds after posting ends (posting 20 per POST runs well over 1,000/s).
    lead_s = 3 + args.drain // 1000
    due_ms = int(time.time() * 1000) + lead_s * 1000
    posted = 0
    try:
        while posted < args.drain:
            batch = min(20, args.drain - posted)
            if has_deliver_at:
                timing: dict[str, int] = {"deliver_at": due_ms}
            else:
                timing = {"delay": max(1, round((due_ms - time.time() * 1000) / 1000))}
            document = {
                "messages": [
                    {"body": {"n": posted + i}, "ttl": 600, **timing} for i in range(batch)
                ]
            }
            answer = await connection.request("POST", f"/v2/queues/{queue}/messages", document)
            assert answer.status == 201, answer.body
            posted += batch
    finally:
        connection.close()
    posting_done_ms = time.time() * 1000
    deadline = time.monotonic() + lead_s + args.grace + args.drain / 200
    while len(hook.arrivals) < posted and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    await hook.stop()
    times = sorted(at for at, _ in hook.arrivals)
    span_s = (times[-1] - times[0]) / 1e9 if len(times) > 1 else 0
    return {
        "messages": posted,
        "posting_ended_before_due_ms": round(due_ms - posting_done_ms),
        "pushed": len(times),
        "early": sum(at / 1e6 < due_ms for at in times) if has_deliver_at else None,
        "first_push_after_due_ms": round(times[0] / 1e6 - due_ms, 1) if times else None,
        "last_push_after_due_ms": round(times[-1] / 1e6 - due_ms, 1) if times else None,
        "deliveries_per_s": round(len(times) / span_s, 1) if span_s else None,
    }


@contextlib.contextmanager
def ours(workers: int) -> Iterator[Server]:
    redis = RedisServer().start()
    service = ServiceProcess(env={STORAGE_URI_ENV: redis.url}, workers=workers).start()
    assert service.process is not None and redis.process is not None
    try:
        yield Server(service.url, service.process.pid, redis.process.pid)
    finally:
        service.stop()
        redis.stop()


@contextlib.contextmanager
def zaqar(workers: int) -> Iterator[Server]:

    venv = peer_venv()
    redis = RedisServer().start()
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as conf:
        conf.write(ZAQAR_PUSH_CONF.format(redis=redis.url, log=conf.name + ".log"))
    server = Gunicorn(
        str(venv / "bin" / "python"),
        "zaqar_app:application",
        workers,
        [],
        {"ZAQAR_PEER_CONFIG": conf.name},
    )
    assert redis.process is not None
    try:
        yield Server(server.url, server.pid, redis.process.pid)
    finally:
        server.stop()
        redis.stop()


def human_line(name: str, rate: dict[str, Any], drain: dict[str, Any]) -> str:
    late = rate["lateness_ms"]
    return (
        f"{name}: at {rate['rate']:.0f}/s for {rate['seconds']} s: pushed {rate['pushed']} of "
        f"{rate['posted']}, {rate['deliveries_per_s']}/s, early {rate['early']}, never "
        f"{rate['never_pushed']}, twice {rate['duplicates']}, lateness p50 {late['p50']} "
        f"p99 {late['p99']} max {late['max']} ms (CPU: server {rate['server_cpu_percent']}%, "
        f"redis {rate['redis_cpu_percent']}%, client {rate['client_cpu_percent']}%); "
        f"drain of {drain['messages']} due at once: {drain['deliveries_per_s']}/s, last "
        f"{drain['last_push_after_due_ms']} ms after due"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000, help="messages posted per second")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--max-delay", type=int, default=5)
    parser.add_argument("--batch", type=int, default=10, help="messages per POST")
    parser.add_argument("--drain", type=int, default=20000, help="messages due at one instant")
    parser.add_argument("--grace", type=float, default=10, help="seconds to wait for stragglers")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--zaqar", action="store_true", help="also run upstream Zaqar")
    args = parser.parse_args()
    servers = [("zaqar-delay", ours, True)] + ([("Zaqar", zaqar, False)] if args.zaqar else [])
    for name, start, has_deliver_at in servers:
        with start(args.workers) as server:
            rate = asyncio.run(rate_run(server, args))
            drain = asyncio.run(drain_run(server, args, has_deliver_at))
        print(json.dumps({"server": name, "rate": rate, "drain": drain}), flush=True)
        print(human_line(name, rate, drain), flush=True)


if __name__ == "__main__":
    main()
