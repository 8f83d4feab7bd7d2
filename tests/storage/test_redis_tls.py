"""Redis over TLS: a standalone store that asks for client certificates, a Sentinel group and
a Cluster whose nodes serve TLS only, each with certificates a private CA signed and named in
the URI (``storage/redis/uri_options.py``). A store the server cannot reach over TLS says why."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from testbed.processes import (
    RedisCluster,
    RedisSentinelGroup,
    RedisServer,
    online_replicas,
    redis_server_binary,
)
from testbed.tls import TlsFiles, make_tls_files, serves_tls
from zaqar_delay.conf import Settings, StorageSettings
from zaqar_delay.models import ClaimTimes, NewMessage
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.uri import open_driver

pytestmark = pytest.mark.skipif(
    not serves_tls(redis_server_binary()),
    reason="the redis-server found has no TLS (apt-get install redis-server; .ci/run does)",
)

NOW = 1_700_000_000_000


@pytest.fixture(scope="module")
def tls() -> TlsFiles:
    return make_tls_files()


@pytest.fixture(scope="module")
def mutual_tls_store(tls: TlsFiles) -> Iterator[RedisServer]:
    """A store that serves TLS only and refuses clients without a certificate its CA signed."""
    server = RedisServer(tls=tls, extra_args=["--tls-auth-clients", "yes"])
    server.start()
    yield server
    server.stop()


def stores_and_claims(driver: Driver) -> None:
    """A message posted through ``driver`` is claimed back through it."""
    project, queue = "p", f"q{uuid.uuid4().hex[:8]}"
    driver.create_queue(project, queue, {}, NOW)
    driver.post_messages(project, queue, [NewMessage('{"n": 1}', 600, 0)], "c", NOW)
    claim = driver.claim(project, queue, ClaimTimes(60, 60), 10, NOW).claim
    assert claim is not None and [m.body for m in claim.messages] == [{"n": 1}]


def serves_through(uri: str, settings: Settings | None = None) -> None:
    """A driver opened on ``uri`` reaches its store, prepares it, and serves a post and a
    claim."""
    driver = open_driver(uri, settings or Settings())
    try:
        assert driver.unreachable_reason() is None
        driver.prepare()
        stores_and_claims(driver)
    finally:
        driver.close()


def test_a_store_asking_for_client_certificates_is_used_with_the_uris_files(
    mutual_tls_store: RedisServer, tls: TlsFiles
) -> None:
    # It serves TLS only: nothing answers in plain text on its port.
    assert mutual_tls_store.client().config_get("port") == {"port": "0"}
    with pytest.raises(redis.ConnectionError):
        redis.Redis(port=mutual_tls_store.port, socket_timeout=2).ping()
    uri = (
        f"rediss://127.0.0.1:{mutual_tls_store.port}/0?ssl_ca_certs={tls.ca}"
        f"&ssl_certfile={tls.cert}&ssl_keyfile={tls.key}"
    )
    serves_through(uri)


def test_a_store_that_does_not_trust_the_server_says_why(
    mutual_tls_store: RedisServer, tls: TlsFiles
) -> None:
    port = mutual_tls_store.port
    without_ca = open_driver(f"rediss://127.0.0.1:{port}/0", Settings())
    without_cert = open_driver(f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={tls.ca}", Settings())
    try:
        reason = without_ca.unreachable_reason()
        assert reason is not None and "CERTIFICATE_VERIFY_FAILED" in reason, reason
        assert reason.endswith(
            "(name the CA that signed the store's certificate in the URI: "
            "ssl_ca_certs=/path/to/ca.pem)"
        )
        assert without_ca.ping() is False
        # The store refuses a client without a certificate of its own.
        assert without_cert.unreachable_reason() is not None
        assert without_cert.ping() is False
    finally:
        without_ca.close()
        without_cert.close()


def test_a_sentinel_groups_tls_data_nodes_take_acknowledged_writes(tls: TlsFiles) -> None:
    group = RedisSentinelGroup(replicas=1, sentinels=1, tls=tls).start()
    try:
        primary = group.data_nodes[0]
        # The replica follows the primary over TLS (no plain port to follow on).
        assert primary.client().config_get("port") == {"port": "0"}
        assert online_replicas(primary.client()) == 1
        # Each write waits for the replica's acknowledgement (WAIT over TLS).
        serves_through(group.url(), Settings(storage=StorageSettings(replica_acks=1)))
    finally:
        group.stop()


def test_sentinels_that_serve_tls_only_are_asked_over_tls(tls: TlsFiles) -> None:
    group = RedisSentinelGroup(replicas=1, sentinels=1, tls=tls, tls_sentinels=True).start()
    try:
        [(host, _, port)] = group.sentinels
        with pytest.raises(redis.ConnectionError):  # nothing answers there in plain text
            redis.Redis(host, port, socket_timeout=2).ping()
        assert "sentinel_tls=true" in group.url()
        serves_through(group.url())
    finally:
        group.stop()


def test_a_tls_cluster_serves_queues_on_every_primary(tls: TlsFiles) -> None:
    cluster = RedisCluster(masters=3, tls=tls).start()
    try:
        assert all(n.client().config_get("port") == {"port": "0"} for n in cluster.nodes)
        driver = open_driver(cluster.url, Settings())
        try:
            assert driver.unreachable_reason() is None
            driver.prepare()
            for _ in range(6):  # queues spread over the slots of the three primaries
                stores_and_claims(driver)
            used = [n.client().dbsize() > 0 for n in cluster.nodes]
            assert sum(used) >= 2, "the queues went to one primary only"
        finally:
            driver.close()
    finally:
        cluster.stop()
