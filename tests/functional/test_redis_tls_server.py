"""The server (gunicorn, gevent workers) on a Redis store that serves TLS only and asks for
client certificates, named with the URI's TLS options: queues, posts, and a waiting claim
woken by a delayed message's due time."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
import requests

from testbed.processes import RedisServer, ServiceProcess, redis_server_binary
from testbed.tls import TlsFiles, make_tls_files, serves_tls
from zaqar_delay.conf import STORAGE_URI_ENV

pytestmark = [
    pytest.mark.functional,
    pytest.mark.skipif(
        not serves_tls(redis_server_binary()),
        reason="the redis-server found has no TLS (apt-get install redis-server; .ci/run does)",
    ),
]

HEADERS = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c", "X-Project-ID": "tls"}


@pytest.fixture
def tls() -> TlsFiles:
    return make_tls_files()


@pytest.fixture
def store(tls: TlsFiles) -> Iterator[RedisServer]:
    server = RedisServer(tls=tls, extra_args=["--tls-auth-clients", "yes"]).start()
    yield server
    server.stop()


def test_a_server_on_a_tls_store_delivers_a_delayed_message_at_its_due_time(
    store: RedisServer, tls: TlsFiles
) -> None:
    # Nothing answers in plain text on the store's port.
    with pytest.raises(redis.ConnectionError):
        redis.Redis(port=store.port, socket_timeout=2).ping()
    uri = (
        f"rediss://127.0.0.1:{store.port}/0?ssl_ca_certs={tls.ca}"
        f"&ssl_certfile={tls.cert}&ssl_keyfile={tls.key}"
    )
    service = ServiceProcess(env={STORAGE_URI_ENV: uri}).start()
    try:
        base = f"{service.url}/v2/queues/later"
        delayed = {"_default_message_delay": 1}  # a delayed queue: messages' delay counts
        assert requests.put(base, json=delayed, headers=HEADERS, timeout=10).status_code == 201
        posted_at = time.time()
        posted = requests.post(
            f"{base}/messages",
            json={"messages": [{"body": "at its time", "ttl": 600, "delay": 2}]},
            headers=HEADERS,
            timeout=10,
        )
        assert posted.status_code == 201, posted.text
        claimed = requests.post(
            f"{base}/claims",
            params={"wait": 20},
            json={"ttl": 60, "grace": 60},
            headers=HEADERS,
            timeout=30,
        )
        assert claimed.status_code == 201, claimed.text
        assert [m["body"] for m in claimed.json()["messages"]] == ["at its time"]
        assert time.time() - posted_at >= 2, "claimed before it was due"
        # What the server stored is on the TLS store.
        assert store.client().dbsize() > 0
    finally:
        service.stop()
