"""What remembering a dedup id costs a post, on each store, at the driver.

On each of ``--stores`` (a redis-server, secantusdb for MongoDB's wire protocol, a Swift
all-in-one), one client makes ``--posts`` single-message posts without a dedup id, then as many
with a fresh one each, ``--rounds`` times, every run on a store started for it (secantusdb
slows as it fills, so runs must not share one). On Redis the id is remembered in the post's
script; on MongoDB and Swift it is a write before the message and a confirmation after it.

    python -m benchmarks.dedup_posts [--stores redis-server,mongodb,swift] [--posts 500]
        [--rounds 2] [--results DIR]

Prints, and writes to ``DIR/dedup-posts-<time>.json``, posts/s by store and kind.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks import recorded
from benchmarks.swift import RESULTS
from testbed.processes import RedisServer, SecantusServer
from testbed.swift_aio import SwiftAllInOne
from tests.helpers.stores import close_test_driver, open_test_driver
from zaqar_delay.clock import FakeClock
from zaqar_delay.models import NewMessage

KINDS = ("plain", "dedup")


# Each store's server, and the URI a driver opens it by.
STORES: dict[str, tuple[Callable[[], Any], Callable[[Any], str]]] = {
    "redis-server": (RedisServer, lambda server: server.url),
    "mongodb": (SecantusServer, lambda server: server.url),
    "swift": (SwiftAllInOne, lambda server: server.store_uri),
}


@contextlib.contextmanager
def running(store: str) -> Iterator[str]:
    """A fresh server of ``store``, stopped afterwards; yields its URI."""
    make, uri_of = STORES[store]
    server = make().start()
    try:
        yield uri_of(server)
    finally:
        server.stop()


def posts_per_second(uri: str, posts: int, dedup: bool) -> float:
    """``posts`` single-message posts to one queue of a fresh namespace, one at a time."""
    driver: Any = open_test_driver(uri)
    clock = FakeClock()
    try:
        driver.create_queue("p", "q", {}, clock.now_ms())
        started = time.perf_counter()
        for _ in range(posts):
            message = NewMessage('"x"', 3600, 0, uuid.uuid4().hex if dedup else "")
            driver.post_messages("p", "q", [message], "a" * 32, clock.now_ms())
        return posts / (time.perf_counter() - started)
    finally:
        close_test_driver(driver)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--posts", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args()
    stores = args.stores.split(",")
    rates: dict[str, dict[str, list[float]]] = {s: {k: [] for k in KINDS} for s in stores}
    for _ in range(args.rounds):
        for store in stores:
            for kind in KINDS:
                with running(store) as uri:
                    rate = posts_per_second(uri, args.posts, kind == "dedup")
                rates[store][kind].append(round(rate, 1))
    report = {"args": {"posts": args.posts, "rounds": args.rounds}, "posts_per_s": rates}
    print(json.dumps(report, indent=1))
    recorded.write(args.results, "dedup-posts", report)


if __name__ == "__main__":
    main()
