"""The embedded store's supervision round against a store that hangs, then dies.

A round runs in gunicorn's master loop, which also answers signals and replaces dead workers:
it must not wait on a store that holds its lock but answers nothing (stopped, or stuck). A
store whose lock is held is alive and left alone; once it dies (a full disk stops it in the
middle of a write) its lock is free, and the next round starts it again on the same files.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from zaqar_delay.processes import alive
from zaqar_delay.storage.redis.embedded import EmbeddedRedis
from zaqar_delay.storage.redis.embedded_control import shut_down

pytestmark = [pytest.mark.faults]

# Long enough that a round waiting on the hung store is told apart from one that does not.
START_TIMEOUT_S = 30.0


def test_a_round_leaves_a_hung_store_alone_and_starts_it_again_once_it_died() -> None:
    directory = tempfile.mkdtemp(prefix="zd-supervision-")
    store = EmbeddedRedis(os.path.join(directory, "test.db"), start_timeout=START_TIMEOUT_S)
    try:
        first = store.pid
        # Stopped, the store holds its lock and answers nothing.
        os.kill(first, signal.SIGSTOP)
        once = Retry(NoBackoff(), 0)
        with pytest.raises(redis.TimeoutError):
            redis.Redis(unix_socket_path=store.socket_path, socket_timeout=0.5, retry=once).ping()
        outcome: dict[str, object] = {}

        def supervise() -> None:
            try:
                outcome["restarted"] = store.keep_running()
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                outcome["error"] = exc

        round_thread = threading.Thread(target=supervise)
        round_thread.start()
        round_thread.join(START_TIMEOUT_S / 2)
        assert not round_thread.is_alive(), "the round waited on the hung store"
        assert outcome == {"restarted": False}, outcome
        assert store.pid == first

        os.kill(first, signal.SIGKILL)
        os.waitpid(first, 0)  # this process started it: collect it
        assert not alive(first), "the store was not killed"
        assert store.keep_running() is True
        assert store.restarts == 1
        assert store.pid != first
        assert redis.Redis(unix_socket_path=store.socket_path).ping()
    finally:
        shut_down(directory, shared_grace_s=None)
        store.close()
