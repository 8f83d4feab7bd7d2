"""zaqar-delay side by side with upstream OpenStack Zaqar, on this machine, one command.

Installs upstream Zaqar from PyPI into a cached virtualenv (once), starts each server on a
redis-server of its own (the same binary, no persistence for either, no auth), with the same
number of gunicorn workers, and runs every scenario of ``loadgen.py`` against both, A/B order
alternating between rounds. Prints a table (metric, Zaqar, zaqar-delay, ratio: medians over
rounds), this machine's ceilings for context (redis-benchmark for the commands the drivers use,
a hello-world falcon app under zaqar-delay's gunicorn settings), and writes every raw JSON
document to ``benchmarks/results/``.

    python -m benchmarks.compare [--seconds 10] [--rounds 2] [--scenarios produce,consume]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.loadgen import run_in_child
from benchmarks.procstat import cpu_seconds
from testbed.processes import (
    RedisServer,
    ServiceProcess,
    free_port,
    redis_server_binary,
    wait_until,
)
from zaqar_delay.conf import STORAGE_URI_ENV

HERE = Path(__file__).resolve().parent

ZAQAR_VERSION = "23.0.1"
SCENARIOS = ["produce", "produce-batch", "consume", "mixed", "lateness", "backlog", "waiting"]
PEER = "Zaqar"
OURS = "zaqar-delay"

ZAQAR_CONF = """\
[DEFAULT]
auth_strategy =
unreliable = true
log_file = {log}
[drivers]
transport = wsgi
message_store = redis
management_store = redis
[drivers:message_store:redis]
uri = {redis}
[drivers:management_store:redis]
uri = {redis}
"""


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(root) / "zaqar-delay-bench"


def peer_venv() -> Path:
    """A virtualenv with upstream Zaqar and our versions of gunicorn, gevent (for
    ``--peer-worker-class gevent``) and the Redis client, built once and cached."""
    pins = [f"zaqar=={ZAQAR_VERSION}"]
    pins += [f"{name}=={metadata.version(name)}" for name in ("gunicorn", "gevent", "redis")]
    venv = cache_dir() / "-".join(p.replace("==", "-") for p in pins)
    python = venv / "bin" / "python"
    if (venv / "ready").exists():
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    print(f"installing {' '.join(pins)} into {venv} (once)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *pins], check=True)
    (venv / "ready").touch()
    return venv


class Gunicorn:
    """A WSGI app under gunicorn from a given virtualenv, on a free loopback port."""

    def __init__(self, python: str, app: str, workers: int, args: list[str], env: dict[str, str]):
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - the server's log, kept open
            prefix="zd-bench-", suffix=".log", delete=False
        )
        command = [python, "-m", "gunicorn", "--chdir", str(HERE / "peer"), "-w", str(workers)]
        command += ["-b", f"127.0.0.1:{self.port}", "--log-level", "warning", *args, app]
        self.process = subprocess.Popen(
            command, env={**os.environ, **env}, stdout=self.log, stderr=subprocess.STDOUT
        )
        wait_until(self._answers, 60, app)

    def _answers(self) -> bool:
        import requests

        if self.process.poll() is not None:
            raise SystemExit(f"{self.process.args} exited; see {self.log.name}")
        return requests.get(f"{self.url}/v2/", timeout=1).status_code < 500

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(20)


class Target:
    """A server under test: its URL, the pids whose CPU counts, its Redis, its options."""

    def __init__(self, name: str, url: str, pids: list[int], redis: RedisServer, waits: bool):
        self.name, self.url, self.pids, self.redis, self.waits = name, url, pids, redis, waits


@contextlib.contextmanager
def targets(args: argparse.Namespace, peer_first: bool) -> Iterator[tuple[Target, Target]]:
    """Both servers and their redis-servers, started for one round (``peer_first``: the
    peer's first), and stopped after it."""
    starts = [_start_peer, _start_ours] if peer_first else [_start_ours, _start_peer]
    with contextlib.ExitStack() as running:
        started = [running.enter_context(start(args)) for start in starts]
        yield (started[0], started[1]) if peer_first else (started[1], started[0])


def _start_ours(args: argparse.Namespace) -> contextlib.AbstractContextManager[Target]:
    return _start_zaqar_delay(args, OURS, None)


def _start_peer(args: argparse.Namespace) -> contextlib.AbstractContextManager[Target]:
    if args.baseline:
        return _start_zaqar_delay(args, peer_name(args), str(checkout(args.baseline)))
    return _start_upstream(args)


@contextlib.contextmanager
def _start_zaqar_delay(args: argparse.Namespace, name: str, cwd: str | None) -> Iterator[Target]:
    """zaqar-delay on a redis-server of its own, from ``cwd`` (this tree's when None)."""
    with _redis() as redis:
        server = ServiceProcess(env={STORAGE_URI_ENV: redis.url}, workers=args.workers, cwd=cwd)
        server.start().wait_for_workers()
        assert server.process is not None and redis.process is not None
        try:
            yield Target(name, server.url, [server.process.pid, redis.process.pid], redis, True)
        finally:
            server.stop()


@contextlib.contextmanager
def _start_upstream(args: argparse.Namespace) -> Iterator[Target]:
    """Upstream Zaqar, from its cached virtualenv, on a redis-server of its own."""
    with _redis() as redis:
        assert redis.process is not None
        venv = peer_venv()
        with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as peer_conf:
            peer_conf.write(ZAQAR_CONF.format(redis=redis.url, log=peer_conf.name + ".log"))
        zaqar = Gunicorn(
            str(venv / "bin" / "python"),
            "zaqar_app:application",
            args.workers,
            ["-k", args.peer_worker_class],
            {"ZAQAR_PEER_CONFIG": peer_conf.name},
        )
        try:
            yield Target(PEER, zaqar.url, [zaqar.pid, redis.process.pid], redis, False)
        finally:
            zaqar.stop()


@contextlib.contextmanager
def _redis() -> Iterator[RedisServer]:
    redis = RedisServer().start()
    try:
        yield redis
    finally:
        redis.stop()


def peer_name(args: argparse.Namespace) -> str:
    """Upstream Zaqar, or zaqar-delay at the ``--baseline`` revision."""
    return f"zaqar-delay@{args.baseline}" if args.baseline else PEER


def checkout(revision: str) -> Path:
    """This repository at ``revision``, checked out (once) under the cache directory."""
    root = HERE.parent
    commit = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--verify", f"{revision}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    tree = cache_dir() / f"baseline-{commit[:12]}"
    if not (tree / "zaqar_delay").is_dir():
        subprocess.run(["git", "-C", str(root), "worktree", "prune"], check=True)
        subprocess.run(
            ["git", "-C", str(root), "worktree", "add", "--detach", str(tree), commit], check=True
        )
    return tree


def loadgen(scenario: str, target: Target, args: argparse.Namespace) -> dict[str, Any]:
    extra = ["--seconds", str(args.seconds)]
    if scenario == "lateness":
        extra += ["--wait", "20"] if target.waits else ["--poll", str(args.poll)]
    if scenario == "backlog":
        extra += ["--sizes", args.backlog_sizes, "--samples", str(args.backlog_samples)]
        extra += ["--redis-url", target.redis.url, "--drop-after"]
    before = cpu_seconds(target.pids)
    try:
        report = run_in_child(scenario, target.url, target.name, extra)
    except SystemExit as failed:
        # A server that cannot run a scenario (Zaqar's claim script past Redis's script time
        # limit on a large backlog, say) is a result too: recorded, and the run goes on.
        print(failed, flush=True)
        return {"scenario": scenario, "label": target.name, "failed": str(failed)[-2000:]}
    report["server_cpu_seconds"] = round(cpu_seconds(target.pids) - before, 2)
    return report


# Metrics of the table: (label, scenario, how to read it from a report, higher is better).
METRICS: list[tuple[str, str, Callable[[dict[str, Any]], float | None], bool]] = [
    ("produce, messages/s (1 per POST)", "produce", lambda r: r["messages_per_s"], True),
    (
        "produce-batch, messages/s (20 per POST)",
        "produce-batch",
        lambda r: r["messages_per_s"],
        True,
    ),
    ("consume, messages/s (claim 10 + deletes)", "consume", lambda r: r["messages_per_s"], True),
    ("mixed, messages/s (in + out)", "mixed", lambda r: r["messages_per_s"], True),
    ("lateness p50, ms", "lateness", lambda r: r["lateness_ms"]["p50"], False),
    ("lateness p99, ms", "lateness", lambda r: r["lateness_ms"]["p99"], False),
    ("lateness max, ms", "lateness", lambda r: r["lateness_ms"]["max"], False),
    ("delivered early (of 2000)", "lateness", lambda r: r["early"], False),
    ("never delivered (of 2000)", "lateness", lambda r: r["never_delivered"], False),
    (
        "backlog: claim p50 at smallest, ms",
        "backlog",
        lambda r: r["sizes"][0]["claim_ms"]["p50"],
        False,
    ),
    (
        "backlog: claim p50 at largest, ms",
        "backlog",
        lambda r: r["sizes"][-1]["claim_ms"]["p50"],
        False,
    ),
    (
        "backlog: largest / smallest",
        "backlog",
        lambda r: r["claim_p50_ratio_largest_to_smallest"],
        False,
    ),
    (
        "backlog: Redis bytes per message",
        "backlog",
        lambda r: r["sizes"][-1]["redis_bytes_per_message"],
        False,
    ),
    ("waiting: claims served (of 1000)", "waiting", lambda r: r["served_exactly_one"], True),
]


def median_of(reports: list[dict[str, Any]], read: Callable[[dict[str, Any]], Any]) -> float | None:
    """The median of what ``read`` finds in the reports of runs that did not fail."""
    values = [v for v in (read(r) for r in reports if "failed" not in r) if v is not None]
    return statistics.median(values) if values else None


def table(
    results: dict[str, dict[str, list[dict[str, Any]]]], peer_label: str = PEER
) -> list[dict[str, Any]]:
    rows = []
    for label, scenario, read, higher in METRICS:
        if scenario not in results:
            continue
        peer = median_of(results[scenario].get(peer_label, []), read)
        ours = median_of(results[scenario].get(OURS, []), read)
        ratio = None
        if peer is not None and ours is not None and higher and peer:
            ratio = round(ours / peer, 2)
        elif peer is not None and ours and not higher and peer >= 0:
            ratio = round(peer / ours, 2)  # how many times better (lower) ours is
        rows.append({"metric": label, peer_label: peer, OURS: ours, "ratio": ratio})
    return rows


def print_table(rows: list[dict[str, Any]], peer_label: str = PEER) -> None:
    def cell(value: Any) -> str:
        return (
            "n/a" if value is None else f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"
        )

    width = max(12, len(peer_label))
    print(f"\n{'metric':44} {peer_label:>{width}} {OURS:>12} {'ratio':>8}")
    for row in rows:
        peer, ours, ratio = cell(row[peer_label]), cell(row[OURS]), cell(row["ratio"])
        print(f"{row['metric']:44} {peer:>{width}} {ours:>12} {ratio:>8}")
    print(
        f"ratio: zaqar-delay / {peer_label} where higher is better, {peer_label} / zaqar-delay "
        "where lower is"
    )


def ceilings(args: argparse.Namespace) -> dict[str, Any]:
    """What this machine can do at all: Redis commands, and falcon saying hello."""
    found: dict[str, Any] = {}
    benchmark = shutil.which("redis-benchmark")
    if benchmark:
        redis = RedisServer().start()
        try:
            tests = "ping,set,get,hset,zadd"  # the commands the Lua scripts mostly run
            run = subprocess.run(
                [
                    benchmark,
                    "-p",
                    str(redis.port),
                    "--csv",
                    "-n",
                    "100000",
                    "-c",
                    "16",
                    "-t",
                    tests,
                ],
                capture_output=True,
                text=True,
                timeout=300,
            )
            rows = [line.replace('"', "").split(",") for line in run.stdout.splitlines()[1:]]
            found["redis_benchmark"] = {row[0]: float(row[1]) for row in rows if len(row) > 1}
        finally:
            redis.stop()
    else:
        found["redis_benchmark"] = "redis-benchmark not installed (Debian package redis-tools)"
    found["hello_world_falcon"] = hello_world_falcon(args.workers, args.seconds)
    return found


def hello_world_falcon(workers: int, seconds: float) -> dict[str, Any]:
    """A hello-world falcon app under gunicorn's gevent workers, loaded as ``produce`` loads a
    server (16 connections): loadgen's JSON document. Its requests per second say how fast
    this machine serves HTTP from Python at all, at the time it ran."""
    hello = Gunicorn(
        sys.executable,
        "hello:application",
        workers,
        ["-k", "gevent", "--worker-connections", "1000"],
        {},
    )
    try:
        command = [sys.executable, "-m", "benchmarks.loadgen", "produce", "--url", hello.url]
        command += ["--seconds", str(seconds), "--label", "hello-world falcon"]
        run = subprocess.run(command, capture_output=True, text=True, timeout=600, check=True)
        document: dict[str, Any] = json.loads(run.stdout.splitlines()[0])
        return document
    finally:
        hello.stop()


def print_ceilings(context: dict[str, Any], workers: int) -> None:
    print("\nceilings on this machine:")
    redis_ops = context["redis_benchmark"]
    if isinstance(redis_ops, dict):
        ops = ", ".join(f"{name} {rps:,.0f}/s" for name, rps in redis_ops.items())
        print(f"  redis-benchmark, 16 connections: {ops}")
    else:
        print(f"  {redis_ops}")
    hello = context["hello_world_falcon"]["messages_per_s"]
    print(f"  hello-world falcon POST (gunicorn gevent, {workers} workers): {hello:,} requests/s")


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        model = next((line.split(":", 1)[1].strip() for line in f if "model name" in line), "")
    redis_version = subprocess.run(
        [redis_server_binary(), "--version"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "redis": redis_version,
        "zaqar": ZAQAR_VERSION,
        "gunicorn": metadata.version("gunicorn"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--backlog-sizes", default="10000,1000000")
    parser.add_argument(
        "--backlog-samples", type=int, default=50, help="claims timed per size (Zaqar's are slow)"
    )
    parser.add_argument("--poll", type=float, default=0.1, help="Zaqar's lateness polling, s")
    parser.add_argument("--peer-worker-class", default="sync", help="gunicorn -k for Zaqar")
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="measure against zaqar-delay at this git revision instead of upstream Zaqar",
    )
    parser.add_argument("--no-ceilings", action="store_true")
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args()
    scenarios = [s for s in args.scenarios.split(",") if s]
    results: dict[str, dict[str, list[dict[str, Any]]]] = {s: {} for s in scenarios}
    started = time.time()
    for round_ in range(args.rounds):
        # Each round has servers of its own, started in its order: a server's speed varies
        # a few percent from one start to the next (its processes' hash seeds and memory
        # layout, its Redis's tables), which rounds on the same servers would all repeat.
        with targets(args, peer_first=round_ % 2 == 0) as (peer, ours):
            order = (peer, ours) if round_ % 2 == 0 else (ours, peer)
            for scenario in scenarios:
                if scenario == "backlog" and round_ > 0:
                    continue  # slow to fill; one round is enough to see the shape
                for target in order:
                    if scenario == "waiting" and not target.waits:
                        continue  # Zaqar has no waiting claims
                    results[scenario].setdefault(target.name, []).append(
                        loadgen(scenario, target, args)
                    )
    rows = table(results, peer_name(args))
    print_table(rows, peer_name(args))
    context = {} if args.no_ceilings else ceilings(args)
    if context:
        print_ceilings(context, args.workers)
    document = {
        "machine": machine(),
        "started": datetime.datetime.fromtimestamp(started, datetime.UTC).isoformat(),
        "seconds": args.seconds,
        "rounds": args.rounds,
        "workers": args.workers,
        "peer": peer_name(args),
        "peer_worker_class": args.peer_worker_class,
        "table": rows,
        "ceilings": context,
        "runs": results,
    }
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / f"compare-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(document, indent=1))
    print(f"\nraw results: {path}")


if __name__ == "__main__":
    main()
