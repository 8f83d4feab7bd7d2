"""A network namespace linked to this one by a veth pair, for partition tests (root only).

``Link.inner`` is the namespace's address, ``Link.outer`` this side's; ``Link.prefix`` runs a
command inside. ``partition()`` takes the namespace's end down, so nothing crosses until
``heal()``: what this side sends to ``inner`` is dropped, unanswered, as a real partition
does. (Taking this side's end down instead would remove the route to ``inner``: connections
would then follow the default route, and whatever the machine's network does with them, a
refusal at once on one machine, an answer on another, would stand in for the partition.)
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time


def available() -> bool:
    """Whether this process can make namespaces: root, with ``ip``."""
    return os.geteuid() == 0 and shutil.which("ip") is not None


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


class Link:
    def __init__(self) -> None:
        tag = f"{random.randrange(1 << 24):06x}"
        self.namespace = f"zd-{tag}"
        self.outer_device, self.inner_device = f"zdo{tag}", f"zdi{tag}"
        subnet = random.randrange(1 << 14)  # a /30 in 10.200.0.0/16
        base = f"10.200.{subnet >> 6}.{(subnet & 63) * 4}"
        prefix, last = base.rsplit(".", 1)
        self.outer, self.inner = f"{prefix}.{int(last) + 1}", f"{prefix}.{int(last) + 2}"
        self.prefix = ["ip", "netns", "exec", self.namespace]

    def __enter__(self) -> Link:
        ip("netns", "add", self.namespace)
        try:
            ip("link", "add", self.outer_device, "type", "veth", "peer", "name", self.inner_device)
            ip("link", "set", self.inner_device, "netns", self.namespace)
            ip("addr", "add", f"{self.outer}/30", "dev", self.outer_device)
            ip("link", "set", self.outer_device, "up")
            inside = ["netns", "exec", self.namespace, "ip"]
            ip(*inside, "addr", "add", f"{self.inner}/30", "dev", self.inner_device)
            ip(*inside, "link", "set", self.inner_device, "up")
            ip(*inside, "link", "set", "lo", "up")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def partition(self) -> None:
        """Take the namespace's end down: this side's end stays up with no carrier, its route
        to ``inner`` stays, and what it sends there is dropped."""
        ip("netns", "exec", self.namespace, "ip", "link", "set", self.inner_device, "down")

    def heal(self, timeout: float = 10.0) -> None:
        """Bring the namespace's end up, and return once this side's end has its carrier
        again: that is reported a moment later (link events are batched), and until then
        packets are still dropped."""
        ip("netns", "exec", self.namespace, "ip", "link", "set", self.inner_device, "up")
        deadline = time.monotonic() + timeout
        while not self._carrier():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.outer_device} did not come back up in {timeout}s")
            time.sleep(0.05)

    def _carrier(self) -> bool:
        try:
            with open(f"/sys/class/net/{self.outer_device}/operstate") as f:
                return f.read().strip() == "up"
        except OSError:
            return False

    def __exit__(self, *exc: object) -> None:
        # Deleting the namespace deletes its end of the pair, and so the pair.
        subprocess.run(["ip", "netns", "del", self.namespace], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", self.outer_device], capture_output=True, timeout=30)
