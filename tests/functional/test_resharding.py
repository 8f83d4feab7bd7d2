"""Scaling a Redis Cluster out under load: a primary is added with no slot, and the slot of the
queue producers and consumers are working on is moved to it (as ``redis-cli --cluster
reshard`` moves slots), slowed down so that requests meet every stage of the move.

While the slot moves, a queue operation whose keys are split between the two primaries is
refused (``TRYAGAIN``: the script did not run), and one whose keys have all left is
redirected (``ASK``) to the new primary, which no slot map listed, and refused there too
until every key it names has arrived. Such refusals answer 503. Afterwards every message
whose post was answered 201 is delivered once, none early, and no request was answered
anything but 201, 204 or a 503 to retry.
"""

from __future__ import annotations

import os
import tempfile
import time

import pytest
import redis

from testbed.processes import RedisCluster, ServiceProcess
from testbed.resharding import add_primary, move_slot
from tests.helpers.failover import HEADERS, QUEUE, STORE_CONFIG, Run, finish_and_check, start_load
from zaqar_delay.conf import STORAGE_URI_ENV
from zaqar_delay.storage.redis.keys import KeySpace

pytestmark = [pytest.mark.functional, pytest.mark.faults]


@pytest.mark.parametrize(
    "replica_acks",
    [
        pytest.param(False, id="cluster-client"),
        # Scripts routed by the driver itself, WAIT after each (storage/redis/shards.py).
        pytest.param(True, id="replica-acks"),
    ],
)
def test_moving_a_busy_queues_slot_to_a_new_primary_loses_nothing_and_answers_no_500(
    replica_acks: bool,
) -> None:
    replicas = 1 if replica_acks else 0
    cluster = RedisCluster(masters=3, replicas=replicas).start()
    added: list = []
    config = os.path.join(tempfile.mkdtemp(prefix="zd-reshard-"), "zaqar-delay.conf")
    with open(config, "w") as f:
        f.write(STORE_CONFIG if replica_acks else "[transport]\ndeliver_at_tolerance = 300\n")
    server = ServiceProcess(env={STORAGE_URI_ENV: cluster.url}, args=["--config-file", config])
    try:
        server.start()
        run = Run()
        threads = start_load(server, run, (QUEUE,))
        added = add_primary(cluster, replicas=replicas)
        time.sleep(2)
        probe = redis.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
        key = KeySpace("zd").queue(HEADERS["X-Project-ID"], QUEUE).queue
        slot, source = probe.keyslot(key), probe.get_node_from_key(key).port
        probe.close()
        ports = [n.port for n in [*cluster.nodes, *added]]
        move = move_slot(ports, source, added[0].port, slot)
        time.sleep(3)  # keep working on the new primary
        # The move happened as described: the new primary was in no slot map, the queue's
        # keys moved to it, and requests were redirected to it while the slot was migrating.
        assert not move.target_listed_before
        assert move.keys_moved > 0
        assert (move.source_keys_held, move.target_keys_held) == (0, move.keys_moved)
        assert move.source_asks > 0, "no request was redirected to the new primary"
        owner = redis.RedisCluster(host="127.0.0.1", port=added[0].port)
        assert owner.get_node_from_key(key).port == added[0].port
        owner.close()
        finish_and_check(run, threads, producers=1)
        assert set(run.refused) <= {503}, f"refused other than 503: {run.refused}"
        print(
            f"slot {slot}: {move.keys_moved} keys moved; {len(run.acknowledged)} messages "
            f"acknowledged and delivered once; refused and retried: {run.refused}"
        )
    finally:
        server.stop()
        for node in added:
            node.stop()
        cluster.stop()
