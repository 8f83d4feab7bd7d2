"""Failover legs: producers and consumers across a store failover, and the checks after."""

from __future__ import annotations

import datetime
import random
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import redis
import requests

from testbed.processes import ServiceProcess

HEADERS = {"X-Project-ID": "failover"}

CONSUMERS = 4
# Posting must work again this long after the primary dies (Sentinel's down-after is 1 s).
POSTING_RESUMES_WITHIN_S = 15.0
CLAIM_TTL_S = 60  # the shortest; a claim whose answer was lost frees its messages after it

QUEUE = "jobs"  # claimed by consumers


# Replica acks; a producer's retry keeps its message's deliver_at however long the failover
# lasts (a deliver_at in the past means "now", up to the tolerance).
STORE_CONFIG = (
    "[storage]\nreplica_acks = 1\nreplica_ack_timeout = 1\nsocket_timeout = 2\n"
    "[transport]\ndeliver_at_tolerance = 300\n"
)


@dataclass
class Run:
    """What the producers and consumers saw, shared between their threads."""

    acknowledged: dict[int, int] = field(default_factory=dict)  # message number -> due ms
    pushed_acknowledged: dict[int, int] = field(default_factory=dict)  # the same, on PUSHED
    # number -> when the post answered 201 was sent (ms)
    acknowledged_sent: dict[int, int] = field(default_factory=dict)
    deliveries: list[tuple[int, str, int]] = field(default_factory=list)  # (n, id, arrival)
    refused: dict[int, int] = field(default_factory=dict)  # status -> count, retried
    last_refused_at: float = 0.0  # epoch s of the last refusal a client saw
    unexpected: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    producing: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)

    def note_refusal(self, status: int) -> None:
        with self.lock:
            self.refused[status] = self.refused.get(status, 0) + 1
            self.last_refused_at = time.time()

    def retry_after(self, status: int, what: str, deadline: float) -> bool:
        """Count a refused request; True to send it again (a 503 or no answer, before
        ``deadline``), else False, with the refusal noted as unexpected."""
        self.note_refusal(status)
        if status in (503, 599) and time.monotonic() <= deadline:
            time.sleep(0.05)
            return True
        with self.lock:
            self.unexpected.append(f"{what}: {status}")
        return False


def first_post_after(killed_at: float, run: Run) -> float:
    """Seconds from the kill to the sending of the first post sent after it and answered 201."""
    killed_ms = killed_at * 1000
    with run.lock:
        after = [at for at in run.acknowledged_sent.values() if at > killed_ms]
    assert after, "no post sent after the kill was answered 201"
    return (min(after) - killed_ms) / 1000


def start_load(server: ServiceProcess, run: Run, queues: tuple[str, ...]) -> list[threading.Thread]:
    """A producer per queue and the consumers of QUEUE, started (daemons: a failed assertion
    must not leave the run waiting for them); the producers come first."""
    run.producing.set()
    threads = [
        threading.Thread(target=produce, args=(server, run, queue), daemon=True) for queue in queues
    ]
    threads += [
        threading.Thread(target=consume, args=(server, run, i), daemon=True)
        for i in range(CONSUMERS)
    ]
    for thread in threads:
        thread.start()
    return threads


def wait_for_posting(run: Run, since: float) -> None:
    """Until a post sent after ``since`` (epoch s) is answered 201."""
    deadline = time.monotonic() + POSTING_RESUMES_WITHIN_S
    while not any(at > since * 1000 for at in list(run.acknowledged_sent.values())):
        assert time.monotonic() < deadline, "posting did not resume after the fault"
        time.sleep(0.05)


def finish_and_check(run: Run, threads: list[threading.Thread], producers: int) -> None:
    """Stop producing, wait (a claim ttl at most) for every acknowledged message to be
    delivered, stop the consumers, and check: none lost, none twice, none early."""
    run.producing.clear()
    for thread in threads[:producers]:
        thread.join(60)
    deadline = time.monotonic() + CLAIM_TTL_S + 30
    while time.monotonic() < deadline:
        with run.lock:
            if {n for n, _, _ in run.deliveries} >= set(run.acknowledged):
                break
        time.sleep(0.2)
    time.sleep(1)  # a second delivery of anything would arrive now
    run.done.set()
    for thread in threads[producers:]:
        thread.join(30)
    delivered = [n for n, _, _ in run.deliveries]
    assert run.unexpected == [], f"answers other than 201, 204 or 503: {run.unexpected[:10]}"
    assert sorted(n for n in set(delivered) if delivered.count(n) > 1) == [], (
        "a message was delivered twice (two live claims, or stored twice)"
    )
    assert set(run.acknowledged) - set(delivered) == set(), "an acknowledged message was lost"
    early = [n for n, _, at in run.deliveries if at < run.acknowledged[n]]
    assert early == [], "a message was delivered before it was due"


def wake_up_listeners(node: redis.Redis) -> int:
    """Connections of the node holding a pattern subscription (a worker's wake-ups)."""
    return sum(1 for client in node.client_list() if int(client.get("psub", 0)) > 0)


def produce(server: ServiceProcess, run: Run, queue: str) -> None:
    """Post one message at a time, each due 0-3 s later with its own dedup_id, retrying a
    refused post with the same dedup_id until it is answered 201."""
    acknowledged = run.acknowledged if queue == QUEUE else run.pushed_acknowledged
    session = requests.Session()
    session.headers.update(headers(0))
    rng = random.Random(queue)
    number = 0
    while run.producing.is_set():
        due = now_ms() + rng.randrange(0, 3000)
        message = {"body": {"n": number}, "ttl": 600, "deliver_at": due, "dedup_id": f"m{number}"}
        deadline = time.monotonic() + 30
        while True:
            sent = now_ms()
            status = send(
                session,
                "POST",
                f"{server.url}/v2/queues/{queue}/messages",
                json={"messages": [message]},
            )
            if status == 201:
                with run.lock:
                    acknowledged[number] = due
                    if queue == QUEUE:
                        run.acknowledged_sent[number] = sent
                break
            if not run.retry_after(status, f"post {queue} {number}", deadline):
                return
        number += 1
        time.sleep(0.01)


def consume(server: ServiceProcess, run: Run, index: int) -> None:
    session = requests.Session()
    session.headers.update(headers(index + 1))
    while not run.done.is_set():
        try:
            answer = session.post(
                f"{server.url}/v2/queues/{QUEUE}/claims?limit=5&wait=1",
                json={"ttl": CLAIM_TTL_S, "grace": 60},
                timeout=10,
            )
        except requests.RequestException:
            run.note_refusal(599)
            time.sleep(0.05)
            continue
        arrived = now_ms()
        if answer.status_code in (503, 204):
            if answer.status_code == 503:
                run.note_refusal(503)
                time.sleep(0.05)
            continue
        if answer.status_code != 201:
            with run.lock:
                run.unexpected.append(f"claim: {answer.status_code} {answer.text}")
            return
        for message in answer.json()["messages"]:
            with run.lock:
                run.deliveries.append((message["body"]["n"], message["id"], arrived))
            # Deleted with the claim id, retried until done (within the claim's life).
            deadline = time.monotonic() + CLAIM_TTL_S / 2
            while (status := send(session, "DELETE", server.url + message["href"])) != 204:
                if not run.retry_after(status, f"delete {message['href']}", deadline):
                    break


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def headers(client: int) -> dict[str, str]:
    return {**HEADERS, "Client-ID": f"00000000-0000-4000-8000-{client:012d}"}


def send(session: requests.Session, method: str, url: str, **kwargs: Any) -> int:
    """The status of one request; 599 for a request the server never answered."""
    try:
        return session.request(method, url, timeout=10, **kwargs).status_code
    except requests.RequestException:
        return 599


# The dispatcher's line for outcomes the store refused to record (those pushes are sent
# again), after the log line's local time.
UNRECORDED = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) .*?(\d+) pushes not recorded, sent again",
    re.MULTILINE,
)


def unrecorded_pushes(log: str) -> list[tuple[float, int]]:
    """When (epoch s) the server logged pushes whose outcome the store refused to record, and
    how many each time, from the server's log."""
    return [
        (datetime.datetime.strptime(at, "%Y-%m-%d %H:%M:%S.%f").timestamp(), int(count))
        for at, count in UNRECORDED.findall(log)
    ]
