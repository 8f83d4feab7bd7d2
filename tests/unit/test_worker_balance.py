"""The table through which the server's workers share connections (cmd/balance.py), and how a
worker accepts with it (cmd/worker.py)."""

from __future__ import annotations

import os
import time

from zaqar_delay.cmd.balance import DEFER_S, ConnectionTable, Share
from zaqar_delay.cmd.worker import FairPyWSGIServer


def test_a_worker_with_more_connections_than_another_defers() -> None:
    table = ConnectionTable(slots=4)
    first, second = Share(table, 0), Share(table, 1)
    first.serving()
    second.serving()
    first.opened()
    assert first.should_defer() and not second.should_defer()
    second.opened()
    assert not first.should_defer() and not second.should_defer()
    second.opened()
    first.closed()
    assert second.should_defer() and not first.should_defer()


def test_a_loading_or_released_worker_takes_no_share() -> None:
    table = ConnectionTable(slots=4)
    slot = table.free_slot(taken=set())
    assert slot == 0
    other = table.free_slot(taken={0})
    assert other == 1
    busy = Share(table, other)
    busy.serving()
    busy.opened()
    # Slot 0's worker is still loading the app: it counts as nothing, not as zero.
    assert not busy.should_defer()
    loading = Share(table, 0)
    loading.serving()
    assert busy.should_defer()
    table.release(0)
    assert not busy.should_defer()


def test_every_slot_held_means_no_slot() -> None:
    table = ConnectionTable(slots=2)
    assert table.free_slot(taken={0, 1}) is None
    assert table.free_slot(taken={1}) == 0


def test_forked_workers_share_one_table() -> None:
    table = ConnectionTable(slots=2)
    parent = Share(table, 0)
    parent.serving()
    child_pid = os.fork()
    if child_pid == 0:  # the child: a worker with three connections
        child = Share(table, 1)
        child.serving()
        for _ in range(3):
            child.opened()
        os._exit(0)
    _, status = os.waitpid(child_pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    parent.opened()
    assert table.fewest() == 1
    for _ in range(3):
        parent.opened()
    assert parent.should_defer()  # four here, three in the child


def _app(environ: dict[str, object], start_response: object) -> list[bytes]:
    return []


def _server_holding_more_than_its_peer() -> tuple[FairPyWSGIServer, Share]:
    """A worker's server holding one connection while its peer holds none: it should defer."""
    table = ConnectionTable(slots=2)
    loaded, idle = Share(table, 0), Share(table, 1)
    server = FairPyWSGIServer(("127.0.0.1", 0), _app, share=loaded)
    idle.serving()
    loaded.opened()
    assert loaded.should_defer()
    return server, loaded


def test_after_a_deferral_one_connection_is_taken_unconditionally() -> None:
    server, loaded = _server_holding_more_than_its_peer()
    assert not server.accepts_now()  # the idle worker should take it
    server.accept_next_unconditionally()  # it did not within DEFER_S
    assert server.accepts_now()
    loaded.opened()
    # The next connection, however soon, is left to the idle worker again.
    assert not server.accepts_now()


def test_the_unconditional_accept_lapses_after_the_wait() -> None:
    server, _ = _server_holding_more_than_its_peer()
    server.accept_next_unconditionally()
    time.sleep(DEFER_S * 5)
    assert not server.accepts_now()


def test_a_worker_without_a_share_always_accepts() -> None:
    server = FairPyWSGIServer(("127.0.0.1", 0), _app)
    assert server.accepts_now() and server.accepts_now()
