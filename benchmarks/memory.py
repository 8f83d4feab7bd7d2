"""Bytes of store memory per outstanding delayed message, for every server in one run.

Posts ``--messages`` delayed messages (bodies of about 40 bytes of JSON, ``--batch`` per POST)
through the v2 API into a queue whose ``_default_message_delay`` keeps them all outstanding,
and reports what the store holds per message:

- zaqar-delay on Redis and, with ``--zaqar``, upstream Zaqar on Redis (the same redis-server
  binary, one each, no persistence): the growth of ``used_memory`` over the posting, divided
  by the number of messages;
- zaqar-delay on MongoDB (the test-only secantusdb, which speaks MongoDB's wire protocol):
  ``collStats`` before and after ``--mongodb-messages`` (20,000: the test-only server is slow)
  are posted, per message: document bytes (``size``), index bytes
  (``totalIndexSize``) and their sum. WiredTiger compresses what it writes to disk
  (``storageSize``), which is printed too but says little about a server's cache.

    python -m benchmarks.memory [--messages 100000] [--batch 20] [--zaqar] [--no-mongodb]

Prints one JSON document per server, then a table, and appends the documents to
``benchmarks/results/memory-<date>.jsonl``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymongo
import redis
import requests

from benchmarks.compare import PEER, ZAQAR_CONF, Gunicorn, peer_venv
from testbed.processes import RedisServer, SecantusServer, ServiceProcess
from zaqar_delay.conf import STORAGE_URI_ENV

HERE = Path(__file__).resolve().parent
QUEUE = "memory"
DELAY_S = 600
TTL_S = 3600


def body(n: int) -> dict[str, str]:
    """About 40 bytes of JSON: {"task": "reminder", "user": "u0000001"}."""
    return {"task": "reminder", "user": f"u{n:07d}"}


def post_backlog(url: str, messages: int, batch: int) -> None:
    """Create the delayed queue and post ``messages`` into it, ``batch`` per POST."""
    session = requests.Session()
    session.headers.update({"Client-ID": str(uuid.uuid4()), "X-Project-ID": "memory"})
    queue = f"{url}/v2/queues/{QUEUE}"
    answer = session.put(queue, json={"_default_message_delay": DELAY_S}, timeout=30)
    assert answer.status_code in (201, 204), answer.text
    for start in range(0, messages, batch):
        count = min(batch, messages - start)
        documents = [{"body": body(start + i), "ttl": TTL_S} for i in range(count)]
        answer = session.post(f"{queue}/messages", json={"messages": documents}, timeout=30)
        assert answer.status_code == 201, answer.text


def redis_bytes(name: str, url: str, redis_url: str, args: argparse.Namespace) -> dict[str, Any]:
    client = redis.Redis.from_url(redis_url)
    before = int(client.info("memory")["used_memory"])
    post_backlog(url, args.messages, args.batch)
    after = int(client.info("memory")["used_memory"])
    return {
        "server": name,
        "store": f"Redis {client.info('server')['redis_version']}",
        "messages": args.messages,
        "batch": args.batch,
        "used_memory_growth": after - before,
        "bytes_per_message": round((after - before) / args.messages, 1),
    }


def mongodb_totals(client: pymongo.MongoClient[Any]) -> dict[str, int]:
    """Sums of collStats over every collection of every database the server holds."""
    totals = {"size": 0, "totalIndexSize": 0, "storageSize": 0, "count": 0}
    for database in client.list_database_names():
        if database in ("admin", "local", "config"):
            continue
        db = client[database]
        for collection in db.list_collection_names():
            stats = db.command("collStats", collection)
            for field in totals:
                totals[field] += int(stats.get(field, 0))
    return totals


def mongodb_bytes(url: str, mongodb_url: str, args: argparse.Namespace) -> dict[str, Any]:
    client: pymongo.MongoClient[Any] = pymongo.MongoClient(mongodb_url)
    messages = args.mongodb_messages or args.messages
    before = mongodb_totals(client)
    post_backlog(url, messages, args.batch)
    after = mongodb_totals(client)
    growth = {field: after[field] - before[field] for field in before}

    def per_message(value: int) -> float:
        return round(value / messages, 1)

    return {
        "server": "zaqar-delay",
        "store": "MongoDB wire protocol (secantusdb, test-only)",
        "messages": messages,
        "batch": args.batch,
        "documents": growth["count"],
        "document_bytes_per_message": per_message(growth["size"]),
        "index_bytes_per_message": per_message(growth["totalIndexSize"]),
        "bytes_per_message": per_message(growth["size"] + growth["totalIndexSize"]),
        "storage_bytes_per_message": per_message(growth["storageSize"]),
    }


@contextlib.contextmanager
def zaqar_delay_on(storage_uri: str) -> Iterator[ServiceProcess]:
    service = ServiceProcess(env={STORAGE_URI_ENV: storage_uri}, workers=2).start()
    try:
        yield service
    finally:
        service.stop()


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    store = RedisServer().start()
    try:
        with zaqar_delay_on(store.url) as service:
            results.append(redis_bytes("zaqar-delay", service.url, store.url, args))
    finally:
        store.stop()
    if args.zaqar:
        store = RedisServer().start()
        with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as conf:
            conf.write(ZAQAR_CONF.format(redis=store.url, log=conf.name + ".log"))
        venv = peer_venv()
        peer = Gunicorn(
            str(venv / "bin" / "python"),
            "zaqar_app:application",
            2,
            [],
            {"ZAQAR_PEER_CONFIG": conf.name},
        )
        try:
            results.append(redis_bytes(PEER, peer.url, store.url, args))
        finally:
            peer.stop()
            store.stop()
    if args.mongodb:
        mongodb = SecantusServer().start()
        try:
            with zaqar_delay_on(mongodb.database_url("zaqar_delay")) as service:
                results.append(mongodb_bytes(service.url, mongodb.url, args))
        finally:
            mongodb.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=20, help="messages per POST")
    parser.add_argument("--zaqar", action="store_true", help="also upstream Zaqar on Redis")
    parser.add_argument("--no-mongodb", dest="mongodb", action="store_false")
    parser.add_argument(
        "--mongodb-messages",
        type=int,
        default=20_000,
        help="messages for MongoDB (the test-only server is slow; 0: --messages)",
    )
    parser.add_argument("--no-record", dest="record", action="store_false")
    args = parser.parse_args()
    results = run(args)
    for result in results:
        print(json.dumps(result))
    print(f"{'server':<12} {'store':<48} {'bytes per outstanding message':>30}")
    for result in results:
        print(f"{result['server']:<12} {result['store']:<48} {result['bytes_per_message']:>30}")
    if args.record:
        day = datetime.date.today().strftime("%Y%m%d")
        with open(HERE / "results" / f"memory-{day}.jsonl", "a") as out:
            for result in results:
                out.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
