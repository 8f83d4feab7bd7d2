"""A throw-away OpenStack Swift all-in-one on loopback ports, from Debian's packages.

One replica on one device by default, or ``replicas`` devices on the same servers, one
replica each: rings built with ``swift-ring-builder`` in a temporary directory
that is also every server's ``swift_dir`` (so ``/etc/swift`` is never read), the object,
container and account servers with ``mount_check = false`` and ``user = root``, memcached for
the proxy's tempauth, and a proxy with tempauth whose user ``test:tester`` (key ``testing``)
is a reseller admin of account ``AUTH_test``. ``.ci/run`` installs the packages.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any

import requests

from testbed.processes import free_port, wait_gone, wait_until

USER, KEY = "test:tester", "testing"
# A second user of the test account, for tests that make Swift refuse a token: its token is
# its own, so the other tests (every pytest worker shares one all-in-one) keep theirs.
REFUSED_USER = "test:refused"
BINARIES = (
    "swift-ring-builder",
    "swift-proxy-server",
    "swift-account-server",
    "swift-container-server",
    "swift-object-server",
    "memcached",
)
SERVERS = ("account", "container", "object")
# The servers run ahead of the test processes (nice -10; as root, else nice only says it
# could not and runs them as they are): the driver counts on an object server committing a
# small object within settle_ms (0.1 s), as on a storage node of its own, and a parallel test
# run keeps every core of a small machine busy.
AHEAD_OF_THE_TESTS = ("nice", "-n", "-10")
# How each storage server is started, and the WSGI pipeline of its configuration.
STORAGE_PIPELINE = "[pipeline:main]\npipeline = {kind}-server\n\n[app:{kind}-server]\n"


# Builds the rings with Swift's RingBuilder: argv is the rings as JSON ({kind: {"port",
# "builder"}}), the devices as JSON (one zone each) and the replica count. Each ring is saved
# as its builder file and, beside it, the ring file the servers read.
RING_SCRIPT = """
import json, sys
from swift.common.ring import RingBuilder
rings, devices, replicas = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
for ring in rings.values():
    builder = RingBuilder(6, replicas, 1)
    for zone, device in enumerate(devices, start=1):
        builder.add_dev({"region": 1, "zone": zone, "ip": "127.0.0.1",
                         "port": ring["port"], "device": device, "weight": 1})
    builder.rebalance()
    builder.save(ring["builder"])
    builder.get_ring().save(ring["builder"].removesuffix(".builder") + ".ring.gz")
"""


def _swift_interpreter() -> str:
    """The Python that Swift's programs run with (their ``#!`` line): Swift's modules are
    installed for it, not for the test environment."""
    program = shutil.which("swift-ring-builder")
    assert program is not None, "swift-ring-builder is missing"
    with open(program, "rb") as script:
        first = script.readline().decode().strip()
    assert first.startswith("#!"), f"{program} does not start with #!"
    return first[2:].strip().split()[0]


def _memory_directory() -> str | None:
    """``/dev/shm`` when it is a directory this process can write to, else None (the
    default temporary directory)."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def missing_binaries() -> list[str]:
    """The programs the all-in-one needs that are not installed."""
    return [binary for binary in BINARIES if shutil.which(binary) is None]


class SwiftAllInOne:
    """Swift's proxy, account, container and object servers and a memcached."""

    def __init__(
        self, access_log_port: int | None = None, replicas: int = 1, workers: int = 1
    ) -> None:
        """``access_log_port``: the proxy sends a syslog line per request it serves to this
        UDP port on loopback (a benchmark counts them); ``replicas``: copies of every
        account, container and object, each on its own device (``sdb1``...); ``workers``:
        the processes each server serves requests with (forked once it has started)."""
        self.access_log_port = access_log_port
        self.replicas = replicas
        self.workers = workers
        # Objects are written with fsync: in memory when the machine has a tmpfs, the
        # servers spend their time serving requests rather than waiting on a disk.
        self.directory = Path(tempfile.mkdtemp(prefix="zd-swift-", dir=_memory_directory()))
        self.ports = {name: free_port() for name in (*SERVERS, "proxy", "memcached")}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def record(self) -> dict[str, Any]:
        """How another process reaches these running servers (:meth:`attach`) and stops
        them (:meth:`stop_recorded`), as JSON."""
        return {
            "directory": str(self.directory),
            "ports": self.ports,
            "replicas": self.replicas,
            "workers": self.workers,
            "access_log_port": self.access_log_port,
            "pids": [process.pid for process in self.processes.values()],
        }

    @classmethod
    def attach(cls, record: dict[str, Any]) -> SwiftAllInOne:
        """The all-in-one another process started and recorded (:meth:`record`): its
        addresses and logs, not its processes, which only :meth:`stop_recorded` stops (this
        object's :meth:`kill` and :meth:`stop` have none to act on)."""
        aio = cls(record["access_log_port"], record["replicas"], record["workers"])
        aio.directory.rmdir()  # made by __init__, unused: the record names the directory
        aio.directory = Path(record["directory"])
        aio.ports = dict(record["ports"])
        return aio

    @staticmethod
    def stop_recorded(record: dict[str, Any]) -> None:
        """Stop the servers of a recorded all-in-one, from any process (each server leads a
        process group of its own), and remove its files."""
        pids = [int(pid) for pid in record["pids"]]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        wait_gone(pids)
        shutil.rmtree(record["directory"], ignore_errors=True)

    @property
    def auth_url(self) -> str:
        """The tempauth v1.0 URL."""
        return f"http://127.0.0.1:{self.ports['proxy']}/auth/v1.0"

    @property
    def store_uri(self) -> str:
        """The storage URI of the test account, naming this all-in-one's auth URL."""
        return self.store_uri_as(USER)

    def store_uri_as(self, user: str) -> str:
        """:attr:`store_uri` as ``user`` (``USER`` or ``REFUSED_USER``)."""
        query = urllib.parse.urlencode({"auth_url": self.auth_url})
        return f"swift://{urllib.parse.quote(user, safe='')}:{KEY}@/test?{query}"

    def forget_token(self, token: str) -> None:
        """Make tempauth refuse ``token`` from now on, as when it expires: its entry in
        memcached goes (Swift's memcache client names an entry by the MD5 of its key). Only
        that entry: a ``flush_all`` would also drop the tokens every other test's client
        holds, and make them all authenticate again at once."""
        key = hashlib.md5(f"AUTH_/token/{token}".encode(), usedforsecurity=False).hexdigest()
        with socket.create_connection(("127.0.0.1", self.ports["memcached"]), 5) as cache:
            cache.sendall(f"delete {key}\r\n".encode())
            assert cache.recv(32) == b"DELETED\r\n", "tempauth had no such token"

    def _write_configuration(self) -> None:
        devices = self.directory / "srv"
        for device in self._devices():
            (devices / device).mkdir(parents=True)
        (self.directory / "swift.conf").write_text(
            "[swift-hash]\nswift_hash_path_suffix = zaqar-delay-tests\n"
            "swift_hash_path_prefix = zaqar-delay\n\n"
            "[storage-policy:0]\nname = gold\ndefault = yes\n"
        )
        # No request log lines from the storage servers and no fallocate: a little less CPU
        # per request (2,000 object writes: object server 3.9 CPU-s instead of 4.1,
        # container server 2.3 instead of 2.7).
        common = (
            f"[DEFAULT]\nbind_ip = 127.0.0.1\nswift_dir = {self.directory}\n"
            f"devices = {devices}\nmount_check = false\nuser = root\nworkers = {self.workers}\n"
            "log_facility = LOG_LOCAL0\nlog_level = WARNING\ndisable_fallocate = true\n"
        )
        for kind in SERVERS:
            (self.directory / f"{kind}-server.conf").write_text(
                common
                + f"bind_port = {self.ports[kind]}\n\n"
                + STORAGE_PIPELINE.format(kind=kind)
                + f"use = egg:swift#{kind}\nlog_requests = false\n"
            )
        (self.directory / "proxy-server.conf").write_text(
            f"[DEFAULT]\nbind_ip = 127.0.0.1\nbind_port = {self.ports['proxy']}\n"
            f"swift_dir = {self.directory}\nuser = root\nworkers = {self.workers}\n"
            "log_level = WARNING\n\n"
            f"[pipeline:main]\npipeline = {self._proxy_pipeline()}\n\n"
            "[app:proxy-server]\nuse = egg:swift#proxy\naccount_autocreate = true\n\n"
            "[filter:tempauth]\nuse = egg:swift#tempauth\n"
            f"user_test_tester = {KEY} .admin .reseller_admin\n"
            f"user_test_refused = {KEY} .admin\n\n"
            "[filter:cache]\nuse = egg:swift#memcache\n"
            f"memcache_servers = 127.0.0.1:{self.ports['memcached']}\n"
            # tempauth keeps its tokens there, and a memcached call that fails is a token
            # refused (401) or one issued but never stored. Swift's defaults (2 connections
            # per proxy worker, a 0.3 s connect and 1 s pool wait, then 60 s without memcached
            # after 10 errors) refused tokens to a loaded test machine's clients.
            "memcache_max_connections = 16\nconnect_timeout = 5\npool_timeout = 5\n"
            "io_timeout = 5\nerror_suppression_limit = 1000000\n\n"
            "[filter:catch_errors]\nuse = egg:swift#catch_errors\n\n"
            # A client's X-Timestamp is kept, as for peers syncing containers, so a test can
            # write as a proxy whose clock is ahead would. The driver never sends one.
            "[filter:gatekeeper]\nuse = egg:swift#gatekeeper\n"
            "shunt_inbound_x_timestamp = false\n\n"
            "[filter:proxy-logging]\nuse = egg:swift#proxy_logging\n"
            + (
                "access_log_level = INFO\naccess_log_udp_host = 127.0.0.1\n"
                f"access_log_udp_port = {self.access_log_port}\n"
                if self.access_log_port
                else ""
            )
        )

    def _proxy_pipeline(self) -> str:
        """The proxy's middlewares: its access log only when a benchmark counts the lines
        (without a port they go nowhere, and logging them costs about a tenth of the proxy's
        CPU per object write: 5,000 writes, 8.5-8.9 CPU-s instead of 9.7)."""
        logging = "proxy-logging " if self.access_log_port else ""
        return f"catch_errors gatekeeper cache tempauth {logging}proxy-server"

    def _devices(self) -> list[str]:
        return [f"sdb{n}" for n in range(1, self.replicas + 1)]

    def _build_rings(self) -> None:
        """The account, container and object rings, built by Swift's own ``RingBuilder`` in
        one run of the interpreter Swift is installed for (one ``swift-ring-builder`` run
        per command would start nine interpreters)."""
        spec = {
            kind: {"port": self.ports[kind], "builder": str(self.directory / f"{kind}.builder")}
            for kind in SERVERS
        }
        run = subprocess.run(
            [
                _swift_interpreter(),
                "-c",
                RING_SCRIPT,
                json.dumps(spec),
                json.dumps(self._devices()),
                str(self.replicas),
            ],
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0, run.stdout + run.stderr

    def start(self) -> SwiftAllInOne:
        """Start every server; after :meth:`kill`, start them again on the same devices,
        rings and ports."""
        if not (self.directory / "proxy-server.conf").exists():
            self._write_configuration()
            self._build_rings()
        self._spawn("memcached", self._memcached_command())
        # The storage servers start together, and must all listen before the proxy starts
        # (see restart()).
        for kind in SERVERS:
            self._spawn_server(kind)
        for kind in SERVERS:
            self._wait_listening(kind)
        self.restart("proxy")
        wait_until(lambda: self.token() is not None, 60, "swift-proxy-server with tempauth")
        # The proxy answers before the storage servers do: wait until a container is stored.
        wait_until(self._stores_containers, 60, "Swift's account and container servers")
        return self

    def _stores_containers(self) -> bool:
        found = self.token()
        if found is None:
            return False
        url, token = found
        answer = requests.put(f"{url}/ready", headers={"X-Auth-Token": token}, timeout=5)
        return answer.status_code in (201, 202)

    def _memcached_command(self) -> list[str]:
        port = str(self.ports["memcached"])
        return ["memcached", "-l", "127.0.0.1", "-p", port, "-U", "0", "-u", "root"]

    def _spawn(self, name: str, command: list[str]) -> None:
        log = open(self.directory / f"{name}.log", "ab")  # noqa: SIM115 - kept with the process
        self.processes[name] = subprocess.Popen(
            [*AHEAD_OF_THE_TESTS, *command],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def token(self) -> tuple[str, str] | None:
        """``(storage URL, token)`` from tempauth, or None while it does not answer so."""
        answer = requests.get(
            self.auth_url, headers={"X-Auth-User": USER, "X-Auth-Key": KEY}, timeout=5
        )
        if answer.status_code != 200:
            return None
        return answer.headers["X-Storage-Url"], answer.headers["X-Auth-Token"]

    def kill(self, names: tuple[str, ...] | None = None) -> None:
        """SIGKILL the servers ``names`` (default: every one): no shutdown, nothing flushed.
        Fails the test unless each died of that signal."""
        for name in names or tuple(self.processes):
            process = self.processes.pop(name)
            os.killpg(process.pid, signal.SIGKILL)
            assert process.wait(10) == -signal.SIGKILL, f"{name} was not killed"

    def restart(self, name: str) -> None:
        """Start one server killed by :meth:`kill` again, with its configuration. A storage
        server is waited for until it accepts connections: a proxy that meets it refusing
        them more than ``error_suppression_limit`` (10) times stops asking it for
        ``error_suppression_interval`` (60 s), so it must be listening before the proxy
        starts (or goes on) sending it requests."""
        if name == "memcached":
            self._spawn(name, self._memcached_command())
            return
        self._spawn_server(name)
        if name in SERVERS:
            self._wait_listening(name)

    def _spawn_server(self, name: str) -> None:
        self._spawn(name, [f"swift-{name}-server", str(self.directory / f"{name}-server.conf")])

    def _wait_listening(self, name: str) -> None:
        wait_until(lambda: self._accepts(self.ports[name]), 30, f"swift-{name}-server")

    @staticmethod
    def _accepts(port: int) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return True
        return False

    def log(self, name: str) -> str:
        return (self.directory / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        """Stop every server and remove the all-in-one's files. The servers are killed, not
        asked to stop: their data is thrown away with the files."""
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        for process in self.processes.values():
            process.wait()
        self.processes.clear()
        shutil.rmtree(self.directory, ignore_errors=True)
