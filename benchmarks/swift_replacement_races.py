"""How often Swift lets a create-only write, or a read, miss an object being updated.

An object server checks a create-only PUT (``If-None-Match: *``) against the object's files as
it finds them, and a GET opens the newest it listed. An update that replaces a file (an
overwrite replaces the data file, a POST after an earlier POST the metadata file) may unlink
it in between: the GET answers 404 and the create-only write passes its check and stores over
the object. On one Swift all-in-one (``testbed/swift_aio.py``), for ``--seconds`` per mode:

- ``overwrite``: one client overwrites a few objects (blind PUTs) over and over;
- ``posts``: one client POSTs their metadata over and over;
- ``first-post``: one client creates objects and POSTs each once (what a Swift dedup generation
  gets: its creation, then its post's confirmation), and the racers aim at the newest;

while another client create-only writes the same names and a third reads them. Every object
exists throughout, so every create that succeeds stored over one, and every 404 is a miss.
Prints one JSON line per mode.

    python -m benchmarks.swift_replacement_races [--seconds 60] [--only overwrite|posts|first-post]
"""

from __future__ import annotations

import argparse
import itertools
import json
import threading
import time
from collections.abc import Callable

from testbed.swift_aio import SwiftAllInOne
from zaqar_delay.storage.swift.access import access_from_uri
from zaqar_delay.storage.swift.connect import SwiftClient

CONTAINER = "replacement-races"
CONTENT_TYPE = "application/json"
NAMES = [f"o{i}" for i in range(4)]
MODES = ("overwrite", "posts", "first-post")


class Race:
    """One mode's run: the updater, the creator and the reader, each on its own client."""

    def __init__(self, access: object, mode: str, seconds: float) -> None:
        self.clients = [SwiftClient(access) for _ in range(3)]  # type: ignore[arg-type]
        self.mode, self.until = mode, time.monotonic() + seconds
        self.counts = {"updates": 0, "creates": 0, "created_over": 0, "reads": 0, "missed": 0}
        self.targets = list(NAMES)
        for name in NAMES:
            self.clients[0].put(CONTAINER, f"{mode}/{name}", b"first", CONTENT_TYPE)

    def _running(self) -> bool:
        return time.monotonic() < self.until

    def update(self) -> None:
        client = self.clients[0]
        for n in itertools.count():
            if not self._running():
                return
            if self.mode == "first-post":
                name = f"new{n}"
                client.put(CONTAINER, f"{self.mode}/{name}", b"made", CONTENT_TYPE)
                self.targets = [name]
                client.set_user_metadata(CONTAINER, f"{self.mode}/{name}", {"X-Object-Meta-S": "1"})
                self.counts["updates"] += 1
                continue
            for name in NAMES:
                path = f"{self.mode}/{name}"
                if self.mode == "overwrite":
                    client.put(CONTAINER, path, f"w{n}".encode(), CONTENT_TYPE)
                else:
                    client.set_user_metadata(CONTAINER, path, {"X-Object-Meta-N": str(n)})
                self.counts["updates"] += 1

    def create(self) -> None:
        while self._running():
            for name in self.targets:
                self.counts["creates"] += 1
                if self.clients[1].create(
                    CONTAINER, f"{self.mode}/{name}", b"created", CONTENT_TYPE
                ):
                    self.counts["created_over"] += 1

    def read(self) -> None:
        while self._running():
            for name in self.targets:
                self.counts["reads"] += 1
                if self.clients[2].get(CONTAINER, f"{self.mode}/{name}") is None:
                    self.counts["missed"] += 1

    def run(self) -> dict[str, object]:
        roles: list[Callable[[], None]] = [self.update, self.create, self.read]
        threads = [threading.Thread(target=role) for role in roles]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for client in self.clients:
            client.close()
        return {"mode": self.mode, **self.counts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--only", choices=MODES)
    args = parser.parse_args()
    aio = SwiftAllInOne().start()
    try:
        access = access_from_uri(aio.store_uri)
        SwiftClient(access).put_container(CONTAINER)
        for mode in [args.only] if args.only else MODES:
            print(json.dumps(Race(access, mode, args.seconds).run()), flush=True)
    finally:
        aio.stop()


if __name__ == "__main__":
    main()
