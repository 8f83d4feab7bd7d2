"""In a gevent worker on Redis Cluster, a pooled connection's readiness check is a system
call, and a pub/sub wait still lets the worker's other greenlets run
(storage/redis/readiness.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from testbed.processes import RedisServer

WORKER = textwrap.dedent(
    """
    import sys
    import time
    from gevent import monkey

    monkey.patch_all()
    import gevent
    from redis._parsers import hiredis

    from zaqar_delay.storage.redis.cluster import LazyClusterClient
    from zaqar_delay.storage.redis.connect import redis_client

    gevent_check = hiredis._socket_can_read
    client = redis_client(sys.argv[1], socket_timeout=5)
    # A standalone client leaves redis-py's check alone (its script calls skip the pool's)...
    assert hiredis._socket_can_read is gevent_check, "a standalone client replaced the check"
    # ...the cluster client, whose script calls take pooled connections, replaces it (for
    # every client of the process: the check is redis-py's, module-wide).
    LazyClusterClient("redis+cluster://127.0.0.1:1", 5.0, 4)
    assert hiredis._socket_can_read is not gevent_check, "the check was not replaced"
    client.set("readiness", "1")
    assert client.get("readiness") == b"1"

    # The immediate check still sees a reply waiting on the socket, and nothing after it.
    connection = client.connection_pool.get_connection()
    assert not connection.can_read()
    connection.send_command("PING")
    gevent.sleep(0.05)
    assert connection.can_read(), "a waiting reply was not seen"
    assert connection.read_response() in (b"PONG", "PONG")
    assert not connection.can_read()
    client.connection_pool.release(connection)

    # A pub/sub wait with a timeout goes through gevent: other greenlets keep running.
    ticks = []
    ticker = gevent.spawn(lambda: [ticks.append(gevent.sleep(0.01)) for _ in range(200)])
    pubsub = client.pubsub()
    pubsub.subscribe("nothing-here")
    started = time.monotonic()
    while time.monotonic() - started < 0.5:  # the confirmation, then nothing
        assert pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5) is None
    ticker.kill()
    print("ticks", len(ticks))
    """
)


def test_readiness_checks_skip_the_hub_and_waits_still_yield(redis_server: RedisServer) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WORKER, redis_server.url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    ticks = int(done.stdout.split()[-1])
    assert ticks >= 20, f"the pub/sub wait blocked the worker: {ticks} ticks in 0.5 s"
