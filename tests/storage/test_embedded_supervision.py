"""The embedded store's supervision round against a store that dies while the round waits on it.

A round that finds the directory's lock held joins the store and waits for it to answer. If
that store dies before answering (a full disk stops it in the middle of a write), nobody else
ever will: the round must see the lock free again and start the store, rather than wait out
its start timeout while every request is refused.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading

import pytest
import redis

from zaqar_delay.storage.redis.embedded import EmbeddedRedis, shut_down
from zaqar_delay.storage.redis.store_files import alive

pytestmark = [pytest.mark.faults]

# Long enough that a round waiting it out is told apart from one that starts the store.
START_TIMEOUT_S = 30.0


def test_a_store_dying_while_a_round_waits_on_it_is_started_again_in_that_round() -> None:
    directory = tempfile.mkdtemp(prefix="zd-supervision-")
    store = EmbeddedRedis(os.path.join(directory, "test.db"), start_timeout=START_TIMEOUT_S)
    try:
        first = store.pid
        # Stopped, the store holds its lock and answers nothing: the round joins it and waits.
        os.kill(first, signal.SIGSTOP)
        outcome: dict[str, object] = {}

        def supervise() -> None:
            try:
                outcome["restarted"] = store.keep_running()
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                outcome["error"] = exc

        round_thread = threading.Thread(target=supervise)
        round_thread.start()
        round_thread.join(1.0)
        assert round_thread.is_alive(), f"the round did not wait on the stopped store: {outcome}"
        os.kill(first, signal.SIGKILL)
        os.waitpid(first, 0)  # this process started it: collect it
        assert not alive(first), "the store was not killed"

        round_thread.join(START_TIMEOUT_S + 10)
        assert not round_thread.is_alive()
        assert outcome == {"restarted": True}, outcome
        assert store.restarts == 1
        assert store.pid != first
        assert redis.Redis(unix_socket_path=store.socket_path).ping()
    finally:
        shut_down(directory, shared_grace_s=None)
        store.close()
