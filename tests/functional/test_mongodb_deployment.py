"""Running on MongoDB: standalone servers refused unless accepted, indexes created at startup,
and (on a real MongoDB only) the claim query served by its index."""

from __future__ import annotations

import concurrent.futures
import os
import tempfile
import time
from collections.abc import Iterator

import pymongo
import pytest
import requests

from testbed.processes import (
    SecantusServer,
    ServiceProcess,
    free_port,
    is_gone,
    process_tree,
    wait_until,
)
from tests.helpers.commands import run_server
from tests.helpers.stores import REAL_MONGODB_ENV, close_test_driver, open_test_driver
from zaqar_delay.conf import STORAGE_URI_ENV
from zaqar_delay.models import NewMessage
from zaqar_delay.storage.mongodb import schema
from zaqar_delay.storage.mongodb.driver import MongoDriver

HEADERS = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c", "X-Project-ID": "p"}

pytestmark = pytest.mark.functional


@pytest.fixture(scope="module")
def standalone() -> Iterator[SecantusServer]:
    server = SecantusServer(standalone=True).start()
    yield server
    server.stop()


def test_standalone_server_is_refused_in_one_line(standalone: SecantusServer) -> None:
    uri = standalone.database_url("zd_refused")
    result = run_server("--bind", f"127.0.0.1:{free_port()}", env={STORAGE_URI_ENV: uri})
    assert result.returncode == 2
    assert result.stderr.startswith("zaqar-delay-server: MongoDB is a standalone server")
    assert result.stderr.count("\n") == 1


def test_standalone_server_accepted_with_a_warning(standalone: SecantusServer) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as conf:
        conf.write("[storage]\nunreliable = true\n")
    uri = standalone.database_url("zd_unreliable")
    service = ServiceProcess(
        env={STORAGE_URI_ENV: uri}, args=["--config-file", conf.name], workers=1
    )
    service.start()
    try:
        assert "standalone server: writes are journaled but not replicated" in service.log()
    finally:
        service.stop()
    client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(standalone.url)
    try:
        names = {index["name"] for index in client.zd_unreliable[schema.MESSAGES].list_indexes()}
    finally:
        client.close()
    assert set(schema.INDEXES[schema.MESSAGES]) <= names


def test_a_server_on_mongodb_starts_and_stops_without_a_traceback(
    secantus_server: SecantusServer,
) -> None:
    service = ServiceProcess(env={STORAGE_URI_ENV: secantus_server.database_url("zd_clean")})
    service.start()
    served = requests.get(f"{service.url}/v2/queues", headers=HEADERS, timeout=10)
    assert served.status_code in (200, 204)
    pids = process_tree(service.process.pid) if service.process else []
    assert len(pids) >= 2, "no workers ran"
    service.stop()
    assert all(is_gone(pid) for pid in pids), "the server did not stop"
    # The store check's client ends its threads before the workers are forked: none is
    # copied into a worker half torn down (it failed there with a KeyError traceback).
    assert "Traceback" not in service.log(), service.log()


def test_prepare_is_idempotent(secantus_server: SecantusServer) -> None:
    driver = open_test_driver(secantus_server.url)
    try:
        assert driver.prepare() == []
        assert driver.prepare() == []
    finally:
        close_test_driver(driver)


@pytest.mark.skipif(
    not os.environ.get(REAL_MONGODB_ENV), reason=f"needs a real MongoDB in {REAL_MONGODB_ENV}"
)
def test_claim_query_uses_the_claimable_index_on_real_mongodb() -> None:
    # secantusdb ignores indexes, so only a real MongoDB can show the plan.
    driver = open_test_driver(os.environ[REAL_MONGODB_ENV])
    assert isinstance(driver, MongoDriver)
    try:
        now = 1_800_000_000_000
        messages = [NewMessage(str(i), 3600, (i % 5) * 1000) for i in range(200)]
        driver.post_messages("p", "q", messages, "c" * 32, now)
        plan = driver.claim_candidates({"p": "p", "q": "q"}, now, 10).explain()
        winning = str(plan["queryPlanner"]["winningPlan"])
        assert "'indexName': 'claimable'" in winning
        assert "'stage': 'SORT'" not in winning  # the index order is the sort order
        stats = plan.get("executionStats", {})
        if stats:
            assert stats["totalKeysExamined"] <= 11
    finally:
        close_test_driver(driver)


def test_without_change_streams_waiting_claims_poll(standalone: SecantusServer) -> None:
    # A standalone server has no change streams, so no wake-ups: a claim waiting in one
    # worker must still find a message another worker stored, by polling.
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as conf:
        conf.write("[storage]\nunreliable = true\n")
    uri = standalone.database_url("zd_polling")
    service = ServiceProcess(env={STORAGE_URI_ENV: uri}, args=["--config-file", conf.name])
    service.start().wait_for_workers()
    url = f"{service.url}/v2/queues/polled"
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(
                requests.post, f"{url}/claims", params={"wait": 20}, headers=HEADERS, timeout=30
            )
            time.sleep(1.0)
            posted = requests.post(
                f"{url}/messages", json={"messages": [{"body": 1}]}, headers=HEADERS, timeout=10
            )
            assert posted.status_code == 201, posted.text
            # The store refused the change stream: the fault this test is about happened.
            wait_until(
                lambda: "no change streams on this MongoDB" in service.log(), 10, "the warning"
            )
            answer = waiting.result(8)  # by polling (every second), not at the end of the wait
        assert answer.status_code == 201, answer.text
        assert [m["body"] for m in answer.json()["messages"]] == [1]
    finally:
        service.stop()
