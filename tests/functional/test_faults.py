"""Faults under load: the store going away and coming back, the server killed and restarted,
on a redis-server with the append-only file, on MongoDB's wire protocol with journaled
writes (secantusdb on WiredTiger, log fsynced at commit), and on a Swift all-in-one (its proxy
and object server are what go away).

Clients see 503 JSON errors (never a 500, never a hang) while the store is away, or connection
errors while the server is away; the service recovers by itself; no message whose POST was
answered 201 is lost and no post is half-written.
"""

from __future__ import annotations

import time

import pytest

from testbed.processes import ServiceProcess, wait_until
from tests.helpers.faults import ANSWER_BOUND_S, BATCH, Load, Store, stored_ids, total
from zaqar_delay.conf import STORAGE_URI_ENV

pytestmark = [pytest.mark.functional, pytest.mark.faults]


def test_store_outage_answers_503_then_recovers(store: Store) -> None:
    service = ServiceProcess(env={STORAGE_URI_ENV: store.uri}).start()
    load = Load(base_url=lambda: service.url, queue="outage")
    try:
        threads = load.run()
        time.sleep(1.5)
        store.kill()  # the process dies; what it acknowledged is in its log
        # Longer than the storage timeout (5 s): MongoDB's driver waits that long for a
        # server before a request fails, and retries writes once one is back.
        time.sleep(8)
        with load.lock:
            outage_statuses = len(load.statuses)
        store.start()
        wait_until(
            lambda: load.statuses[-1] == 201 and len(load.statuses) > outage_statuses,
            30,
            "recovery after the store came back",
        )
        time.sleep(1)
        load.stop.set()
        for thread in threads:
            thread.join(30)
        assert 503 in load.statuses, "the outage was never seen"
        assert set(load.statuses) <= {201, 503}, load.bad_errors
        assert load.bad_errors == []
        assert load.slowest_s < ANSWER_BOUND_S
        assert stored_ids(service.url, "outage", load.acked) == set(load.acked)
        # All or nothing: every stored post is whole (a post cut off by the outage may have
        # been written without its answer, but never in part).
        assert total(service.url, "outage") % BATCH == 0
    finally:
        load.stop.set()
        service.stop()


def test_server_killed_under_load_loses_nothing(store: Store) -> None:
    first = ServiceProcess(env={STORAGE_URI_ENV: store.uri}).start()
    current = {"service": first}
    load = Load(base_url=lambda: current["service"].url, queue="restart")
    second: ServiceProcess | None = None
    try:
        threads = load.run()
        time.sleep(1.5)
        assert first.kill(), "the server was not killed"
        second = ServiceProcess(env={STORAGE_URI_ENV: store.uri}).start()
        current["service"] = second
        acked_before = len(load.acked)
        wait_until(lambda: len(load.acked) > acked_before + 50, 30, "posts to the new server")
        load.stop.set()
        for thread in threads:
            thread.join(30)
        assert load.bad_errors == []
        assert set(load.statuses) == {201}
        assert load.connection_errors > 0, "the kill was never seen"
        assert stored_ids(second.url, "restart", load.acked) == set(load.acked)
        stored = total(second.url, "restart")
        assert stored % BATCH == 0
        # Posts in flight when the server died may be stored without an answer: at most one
        # per client thread.
        assert len(load.acked) <= stored <= len(load.acked) + 3 * BATCH
    finally:
        load.stop.set()
        if second is not None:
            second.stop()
        first.stop()
