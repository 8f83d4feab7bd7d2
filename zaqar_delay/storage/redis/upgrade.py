"""Moving queues stored in the layout before buckets (an earlier release's) into the layout the
scripts read and write (``lua/lib.lua``'s buckets), at a driver's start, and recording that it
is done so later starts skip the scan."""

from __future__ import annotations

from typing import Any

from zaqar_delay.storage.redis.keys import KeySpace
from zaqar_delay.storage.redis.scripts import ScriptCall

# The message layout the scripts read and write, and how many messages one upgrade call moves
# out of the layout before it.
LAYOUT = b"2"
UPGRADE_BATCH = 500


def upgrade_layout(client: Any, keys: KeySpace, upgrade: ScriptCall) -> int:
    """Move every queue in the layout before buckets into them (``lua/upgrade.lua``), a batch
    per call, and record the layout; how many queues were moved."""
    layout_key = keys.layout()
    if client.get(layout_key) == LAYOUT:
        return 0
    upgraded = 0
    for key in client.scan_iter(match=keys.legacy_fifo_pattern(), count=1000):
        project, queue = keys.queue_of_key(key.decode())
        queue_keys = keys.queue(project, queue).as_list() + keys.legacy_queue(project, queue)
        while upgrade(keys=queue_keys, args=[UPGRADE_BATCH]):
            pass
        upgraded += 1
    client.set(layout_key, LAYOUT)
    return upgraded


def queues_to_upgrade(client: Any, keys: KeySpace) -> int:
    """How many queues the next start moves (0 once the layout is recorded)."""
    if client.get(keys.layout()) == LAYOUT:
        return 0
    return sum(1 for _ in client.scan_iter(match=keys.legacy_fifo_pattern(), count=1000))
