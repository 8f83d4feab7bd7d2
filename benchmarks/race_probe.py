"""Concurrent random API operations on two queue names, for the races between them.

Starts ``--store`` (a redis-server, secantusdb for MongoDB's wire protocol, or a Swift
all-in-one) and two zaqar-delay servers of two workers sharing it, then ``--threads`` clients
send random requests for ``--seconds``: queues created (always with the same metadata),
deleted and purged; messages posted (plain and with a few ``dedup_id`` values), listed,
claimed, deleted, popped, bulk-deleted and rescheduled; claims renewed and released;
subscriptions and schedules made and removed; topics posted to. Metadata is never changed by
this mix, so no request meets a queue whose metadata keeps changing.

Printed: the answers by operation and status, the answers that name a fault (any 5xx: a
store shared on loopback does not go away here), and the tracebacks in the servers' logs.
A run with faults exits 1.

    python -m benchmarks.race_probe --store mongodb --seconds 120
    python -m benchmarks.race_probe --store swift --seconds 150 --threads 8

Races this found, each now a test: MongoDB posts answering 503 after a queue deletion kept a
racing post's messages, a subscription created twice answering 503 while the first was
deleted, and (MongoDB and Swift) a subscription made during its queue's deletion never pushed.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import requests

from benchmarks.dedup_posts import running
from testbed.processes import ServiceProcess
from zaqar_delay.conf import STORAGE_URI_ENV

HEADERS = {"X-Project-ID": "race", "Client-ID": "3381af92-2b9e-11e3-b191-71861300734c"}
NAMES = ("q1", "q2")
PATCH_HEADERS = {**HEADERS, "Content-Type": "application/openstack-messaging-v2.0-json-patch"}


class Probe:
    """Random requests against ``urls`` (servers sharing one store), their answers counted."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.answers: collections.Counter[str] = collections.Counter()
        self.faults: list[str] = []
        self._lock = threading.Lock()
        self._operations: list[Callable[[requests.Session, str, str], None]] = [
            self.post,
            self.post,
            self.post_dedup,
            self.claim,
            self.claim,
            self.list,
            self.pop,
            self.bulk_delete,
            self.reschedule,
            self.renew_or_release,
            self.create_queue,
            self.delete_queue,
            self.purge,
            self.stats,
            self.subscribe,
            self.unsubscribe,
            self.schedule,
            self.topic,
        ]

    def run(self, seconds: float, threads: int) -> None:
        end = time.monotonic() + seconds

        def client() -> None:
            session = requests.Session()
            while time.monotonic() < end:
                base = random.choice(self.urls)
                queue = f"{base}/v2/queues/{random.choice(NAMES)}"
                try:
                    random.choice(self._operations)(session, base, queue)
                except requests.RequestException as exc:
                    self._fault(f"request failed: {exc!r}")

        workers = [threading.Thread(target=client) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    def _record(self, operation: str, answer: requests.Response) -> None:
        with self._lock:
            self.answers[f"{operation} {answer.status_code}"] += 1
        if answer.status_code >= 500:
            self._fault(f"{operation} {answer.status_code} {answer.text[:300]}")

    def _fault(self, text: str) -> None:
        with self._lock:
            self.faults.append(text)

    # -- operations ----------------------------------------------------------------------------

    def post(self, session: requests.Session, base: str, queue: str) -> None:
        count = random.randint(1, 5)
        body = {"messages": [{"body": {"n": n}, "ttl": 120, "delay": n % 2} for n in range(count)]}
        self._record("post", session.post(f"{queue}/messages", json=body, headers=HEADERS))

    def post_dedup(self, session: requests.Session, base: str, queue: str) -> None:
        ids = [f"job-{random.randint(1, 6)}" for _ in range(random.randint(1, 3))]
        body = {"messages": [{"body": i, "ttl": 120, "dedup_id": i} for i in ids]}
        self._record("post dedup", session.post(f"{queue}/messages", json=body, headers=HEADERS))

    def claim(self, session: requests.Session, base: str, queue: str) -> None:
        claimed = session.post(
            f"{queue}/claims?limit=5", json={"ttl": 60, "grace": 60}, headers=HEADERS
        )
        self._record("claim", claimed)
        if claimed.status_code == 201 and random.random() < 0.7:
            for message in claimed.json()["messages"]:
                deleted = session.delete(base + message["href"], headers=HEADERS)
                self._record("delete claimed", deleted)

    def list(self, session: requests.Session, base: str, queue: str) -> None:
        listed = session.get(f"{queue}/messages?echo=true&include_claimed=true", headers=HEADERS)
        self._record("list", listed)

    def pop(self, session: requests.Session, base: str, queue: str) -> None:
        self._record("pop", session.delete(f"{queue}/messages?pop=3", headers=HEADERS))

    def _listed_ids(self, session: requests.Session, queue: str) -> list[str]:
        listed = session.get(f"{queue}/messages?echo=true&include_delayed=true", headers=HEADERS)
        if listed.status_code != 200 or not listed.content:
            return []
        return [m["id"] for m in listed.json().get("messages", [])]

    def bulk_delete(self, session: requests.Session, base: str, queue: str) -> None:
        ids = self._listed_ids(session, queue)[:5]
        if ids:
            deleted = session.delete(f"{queue}/messages?ids={','.join(ids)}", headers=HEADERS)
            self._record("bulk delete", deleted)

    def reschedule(self, session: requests.Session, base: str, queue: str) -> None:
        ids = self._listed_ids(session, queue)
        if ids:
            edit = random.choice([{"delay": 1}, {"body": "edited"}, {"ttl": 100}])
            edited = session.patch(f"{queue}/messages/{ids[0]}", json=edit, headers=HEADERS)
            self._record("edit", edited)

    def renew_or_release(self, session: requests.Session, base: str, queue: str) -> None:
        claimed = session.post(
            f"{queue}/claims?limit=2", json={"ttl": 60, "grace": 60}, headers=HEADERS
        )
        if claimed.status_code != 201:
            return
        claim = base + claimed.headers["Location"]
        if random.random() < 0.5:
            self._record("release", session.delete(claim, headers=HEADERS))
        else:
            self._record("renew", session.patch(claim, json={"ttl": 120}, headers=HEADERS))

    def create_queue(self, session: requests.Session, base: str, queue: str) -> None:
        metadata = {"_default_message_delay": 1}
        self._record("create queue", session.put(queue, json=metadata, headers=HEADERS))

    def delete_queue(self, session: requests.Session, base: str, queue: str) -> None:
        self._record("delete queue", session.delete(queue, headers=HEADERS))

    def purge(self, session: requests.Session, base: str, queue: str) -> None:
        kinds = random.choice([["messages"], ["subscriptions"], ["messages", "subscriptions"]])
        purged = session.post(f"{queue}/purge", json={"resource_types": kinds}, headers=HEADERS)
        self._record("purge", purged)

    def stats(self, session: requests.Session, base: str, queue: str) -> None:
        self._record("stats", session.get(f"{queue}/stats", headers=HEADERS))

    def subscribe(self, session: requests.Session, base: str, queue: str) -> None:
        subscriber = f"http://127.0.0.1:9/hook-{random.randint(1, 3)}"
        body = {"subscriber": subscriber, "ttl": 3600, "options": {}}
        made = session.post(f"{queue}/subscriptions", json=body, headers=HEADERS)
        self._record("subscribe", made)

    def unsubscribe(self, session: requests.Session, base: str, queue: str) -> None:
        listed = session.get(f"{queue}/subscriptions", headers=HEADERS)
        found = listed.json().get("subscriptions", []) if listed.status_code == 200 else []
        if found:
            removed = session.delete(f"{queue}/subscriptions/{found[0]['id']}", headers=HEADERS)
            self._record("unsubscribe", removed)

    def schedule(self, session: requests.Session, base: str, queue: str) -> None:
        if random.random() < 0.5:
            body = {"every": 60, "message": {"body": 1, "ttl": 60}}
            self._record(
                "schedule", session.put(f"{queue}/schedules/s1", json=body, headers=HEADERS)
            )
        else:
            self._record("unschedule", session.delete(f"{queue}/schedules/s1", headers=HEADERS))

    def topic(self, session: requests.Session, base: str, queue: str) -> None:
        topic = f"{base}/v2/topics/t{random.randint(1, 2)}"
        body = {"messages": [{"body": 1, "ttl": 60}]}
        self._record("topic post", session.post(f"{topic}/messages", json=body, headers=HEADERS))


def probe(store: str, seconds: float, threads: int) -> dict[str, Any]:
    with running(store) as uri:
        servers = [ServiceProcess(env={STORAGE_URI_ENV: uri}).start() for _ in NAMES]
        try:
            for server in servers:
                server.wait_for_workers()
            found = Probe([server.url for server in servers])
            found.run(seconds, threads)
            tracebacks = sum(server.log().count("Traceback") for server in servers)
        finally:
            for server in servers:
                server.stop()
    return {
        "store": store,
        "answers": dict(sorted(found.answers.items())),
        "faults": found.faults,
        "tracebacks": tracebacks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=["redis-server", "mongodb", "swift"], default="mongodb")
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    report = probe(args.store, args.seconds, args.threads)
    print(json.dumps(report))
    sys.exit(1 if report["faults"] or report["tracebacks"] else 0)


if __name__ == "__main__":
    main()
